#!/usr/bin/env bash
# End-to-end checks of the cachegen CLI: encode/decode/inspect/verify, token ranges, stores,
# exit codes. Usage: cli_test.sh CACHEGEN_BINARY TEST_DATA_DIR
set -uo pipefail
cg=$(realpath "$1")
data=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0
failed=0
check() {  # check NAME EXPECTED_RC COMMAND...
  local name=$1 want=$2
  shift 2
  "$@" >"$work/out" 2>&1
  local rc=$?
  if [[ $rc == "$want" ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: exit $rc, expected $want"
    sed 's/^/    /' "$work/out" | head -20
  fi
}
# A small KV array from the golden walk input: walk128x32_4bit_input.npy is float32 [128, 32] = [1, 2, 128, 2, 8] in C order.
src="$data/golden/walk128x32_4bit_input.npy"
# Rewrite its header to the 5-d shape (same bytes, same order).
hdr_len=$(( $(od -An -tu2 -j8 -N2 "$src") ))
{
  h="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 128, 2, 8), }"
  pad=$(( (64 - (10 + ${#h} + 1) % 64) % 64 ))
  printf '\x93NUMPY\x01\x00'
  total=$(( ${#h} + pad + 1 ))
  printf "\\x$(printf %02x $((total & 255)))\\x$(printf %02x $((total >> 8)))"
  printf '%s' "$h"
  printf '%*s' "$pad" ''
  printf '\n'
  tail -c +$((10 + hdr_len + 1)) "$src"
} >kv.npy

check "encode" 0 "$cg" encode kv.npy -o kv.cgkv --bits 4 --chunk-tokens 64
check "verify" 0 "$cg" verify kv.cgkv
check "inspect" 0 "$cg" inspect kv.cgkv
check "inspect --json" 0 "$cg" inspect kv.cgkv --json
grep -q '"n_tokens": 128' "$work/out" || { failed=$((failed + 1)); echo "FAIL: inspect json lacks n_tokens"; }
check "decode" 0 "$cg" decode kv.cgkv -o back.npy
check "decode range" 0 "$cg" decode kv.cgkv -o part.npy --tokens 10:70
check "lossless needs fp16" 2 "$cg" encode kv.npy -o l.cgkv --lossless
check "level medium" 0 "$cg" encode kv.npy -o med.cgkv --level medium
check "level high pre-RoPE" 0 "$cg" encode kv.npy -o hi.cgkv --level high --rope-base 10000
check "level verify" 0 "$cg" verify hi.cgkv
check "bad level" 2 "$cg" encode kv.npy -o x.cgkv --level ultra
check "reference params" 0 "$cg" encode kv.npy -o ref.cgkv --params reference --bits 8
check "bad range" 2 "$cg" decode kv.cgkv -o x.npy --tokens 50:500
check "missing file" 3 "$cg" decode missing.cgkv -o x.npy
check "bad bits" 2 "$cg" encode kv.npy -o x.cgkv --bits 9
check "bad chunk" 2 "$cg" encode kv.npy -o x.cgkv --chunk-tokens 33
# Corrupt one byte in the middle: verify names the problem, exit code 4.
cp kv.cgkv bad.cgkv
size=$(stat -c %s bad.cgkv)
printf '\xff' | dd of=bad.cgkv bs=1 seek=$((size / 2)) conv=notrunc status=none
check "corrupt detected" 4 "$cg" verify bad.cgkv
head -c 100 kv.cgkv >short.cgkv
check "truncated detected" 4 "$cg" verify short.cgkv
# Stores.
check "encode into file store" 0 "$cg" encode kv.npy -o ctx/0 --store "file://$work/store"
check "verify from store" 0 "$cg" verify ctx/0 --store "file://$work/store"
check "decode from store" 0 "$cg" decode ctx/0 -o s.npy --store "file://$work/store"
cmp -s s.npy back.npy || { failed=$((failed + 1)); echo "FAIL: store round trip differs from file round trip"; }
check "store put" 0 "$cg" store put "file://$work/store" raw kv.cgkv
check "store get" 0 "$cg" store get "file://$work/store" raw -o got.cgkv
cmp -s got.cgkv kv.cgkv || { failed=$((failed + 1)); echo "FAIL: store get differs"; }
check "store list" 0 "$cg" store list "file://$work/store"
grep -q '^ctx/0$' "$work/out" || { failed=$((failed + 1)); echo "FAIL: store list lacks ctx/0"; }
check "store rm" 0 "$cg" store rm "file://$work/store" raw
check "store rm missing" 3 "$cg" store rm "file://$work/store" raw
# A killed writer's temp file: gc removes it once older than the grace period, nothing else.
touch -d '2 hours ago' "$work/store/.tmp-0123456789abcdef"
check "store gc" 0 "$cg" store gc --store "file://$work/store"
grep -q '^removed 1 ' "$work/out" || { failed=$((failed + 1)); echo "FAIL: store gc removed $(cat "$work/out")"; }
[ ! -e "$work/store/.tmp-0123456789abcdef" ] || { failed=$((failed + 1)); echo "FAIL: temp file survived gc"; }
check "store gc keeps values" 0 "$cg" verify ctx/0 --store "file://$work/store"
check "store gc without store" 2 "$cg" store gc
check "bad store url" 2 "$cg" verify x --store "ftp://nowhere"
check "bench seed" 0 "$cg" bench seed --json
grep -q '"coded_bytes"' "$work/out" || { failed=$((failed + 1)); echo "FAIL: bench seed lacks coded_bytes"; }
check "usage" 2 "$cg" frobnicate

# ---- Hardening (issue 12) ----
# npy_f16 FILE SHAPE PERL_EXPR: a float16 .npy whose element i (C order) has the fp16 bit
# pattern PERL_EXPR (of $i); npy_raw FILE DESCR SHAPE BYTES: any header over BYTES zero bytes.
npy_header() {  # DESCR SHAPE
  local h="{'descr': '$1', 'fortran_order': False, 'shape': $2, }"
  local pad=$(( (64 - (10 + ${#h} + 1) % 64) % 64 ))
  local total=$(( ${#h} + pad + 1 ))
  printf '\x93NUMPY\x01\x00'
  printf "\\x$(printf %02x $((total & 255)))\\x$(printf %02x $((total >> 8)))"
  printf '%s' "$h"
  printf '%*s' "$pad" ''
  printf '\n'
}
npy_f16() {  # FILE SHAPE N PERL_EXPR
  { npy_header '<f2' "$2"; perl -e "print pack('v*', map { my \$i = \$_; $4 } 0..$3-1)"; } >"$1"
}
npy_raw() {  # FILE DESCR SHAPE BYTES
  { npy_header "$2" "$3"; head -c "$4" /dev/zero; } >"$1"
}
expect_text() {  # NAME TEXT: the last command's output contains TEXT
  grep -qF -- "$2" "$work/out" || { failed=$((failed + 1)); echo "FAIL: $1: output lacks '$2'"; sed 's/^/    /' "$work/out" | head -5; }
}
reject_text() {  # NAME TEXT: the last command's output does not contain TEXT
  ! grep -qF -- "$2" "$work/out" || { failed=$((failed + 1)); echo "FAIL: $1: output has '$2'"; }
}
count_nonfinite() {  # FILE.npy (float16): prints how many values are Inf or NaN
  perl -e 'local $/; my $b = <STDIN>; my $hl = unpack("v", substr($b, 8, 2));
           my @h = unpack("v*", substr($b, 10 + $hl)); print scalar(grep { ($_ & 0x7c00) == 0x7c00 } @h), "\n"' <"$1"
}

# Finite fp16 at +-65504 (T = 1024 tokens, 1 head x 4 dims): channel 0 alternates -65504/65504,
# channel 1 ramps over every fp16 bit pattern 0..65504, channel 2 is 1.0 with one -65504,
# channel 3 a constant subnormal. The encoder must write what decode/verify accept, and decoding
# must give finite values on every SIMD path.
npy_f16 ext.npy "(1, 2, 1024, 1, 4)" 8192 \
  'my ($t, $c) = (int($i / 4) % 1024, $i % 4);
   $c == 0 ? ($t % 2 ? 0x7bff : 0xfbff) : $c == 1 ? int(0x7bff * $t / 1023)
   : $c == 2 ? ($t == 512 ? 0xfbff : 0x3c00) : 0x0001'
for bits in 1 4 8; do
  check "encode fp16 extremes $bits bits" 0 "$cg" encode ext.npy -o ext$bits.cgkv --bits $bits
  check "verify fp16 extremes $bits bits" 0 "$cg" verify ext$bits.cgkv
  for simd in scalar avx2 avx512; do
    check "decode fp16 extremes $bits bits $simd" 0 env CACHEGEN_SIMD=$simd "$cg" decode ext$bits.cgkv -o ext$bits.$simd.npy
    n=$(count_nonfinite ext$bits.$simd.npy)
    [[ $n == 0 ]] || { failed=$((failed + 1)); echo "FAIL: $bits-bit decode ($simd) of finite input has $n Inf/NaN"; }
    cmp -s ext$bits.$simd.npy ext$bits.scalar.npy || { failed=$((failed + 1)); echo "FAIL: $simd decode differs from scalar"; }
  done
done
# Keys (65504, 0) in one RoPE pair: undone they stay within fp16, re-rotated after quantization
# they may land past 65504 and must saturate. (ext.npy's keys cannot be undone within fp16:
# the encoder refuses them, naming the element.)
npy_f16 pair.npy "(1, 2, 1024, 1, 2)" 4096 '$i % 2 ? 0 : 0x7bff'
check "encode fp16 extremes pre-RoPE" 0 "$cg" encode pair.npy -o extrope.cgkv --level high --rope-base 10000
check "decode fp16 extremes pre-RoPE" 0 "$cg" decode extrope.cgkv -o extrope.npy
n=$(count_nonfinite extrope.npy)
[[ $n == 0 ]] || { failed=$((failed + 1)); echo "FAIL: pre-RoPE decode of finite input has $n Inf/NaN"; }
check "encode fp16 extremes reference params" 0 "$cg" encode ext.npy -o extref.cgkv --bits 3 --params reference
check "decode fp16 extremes reference params" 0 "$cg" decode extref.cgkv -o extref.npy
n=$(count_nonfinite extref.npy)
[[ $n == 0 ]] || { failed=$((failed + 1)); echo "FAIL: reference-params decode of finite input has $n Inf/NaN"; }

# A dimension >= 2^32 is not truncated: (4294967297, 2, 0, 4, 8) holds no data but is no
# 1-layer array either.
npy_raw huge.npy '<f2' "(4294967297, 2, 0, 4, 8)" 0
check "npy dimension >= 2^32" 4 "$cg" encode huge.npy -o huge.cgkv
expect_text "npy dimension >= 2^32" "n_layers"
npy_raw layers.npy '<f2' "(5000, 2, 1, 1, 1)" 20000
check "npy absurd n_layers" 4 "$cg" encode layers.npy -o x.cgkv
npy_raw shape4.npy '<f2' "(1, 2, 4, 8)" 128
check "npy not 5-d" 4 "$cg" encode shape4.npy -o x.cgkv

# Wrong dtypes are unsupported input (4), known or not; messages print the code once.
npy_raw i16.npy '<i2' "(1, 2, 4, 1, 8)" 128
check "npy int16 dtype" 4 "$cg" encode i16.npy -o x.cgkv
npy_raw c8.npy '<c8' "(1, 2, 4, 1, 8)" 512
check "npy complex dtype" 4 "$cg" encode c8.npy -o x.cgkv
reject_text "error printed once" "corrupt_input: corrupt_input"
npy_raw trunc.npy '<f2' "(1, 2, 4, 1, 8)" 10
check "npy truncated" 4 "$cg" encode trunc.npy -o x.cgkv
reject_text "error printed once" "truncated_input: truncated_input"

# Option names, not library field names.
check "chunk tokens message" 2 "$cg" encode kv.npy -o x.cgkv --chunk-tokens 33
expect_text "chunk tokens message" "--chunk-tokens"
reject_text "chunk tokens message" "config."
check "rope base nan" 2 "$cg" encode kv.npy -o x.cgkv --level high --rope-base nan
check "rope scale absurd" 2 "$cg" encode kv.npy -o x.cgkv --level high --rope-base 10000 --rope-scale 3e38
check "bad CACHEGEN_SIMD" 2 env CACHEGEN_SIMD=bogus "$cg" verify kv.cgkv
expect_text "bad CACHEGEN_SIMD" "CACHEGEN_SIMD"
check "bad CACHEGEN_THREADS" 2 env CACHEGEN_THREADS=abc "$cg" verify kv.cgkv
check "bad CACHEGEN_THREADS 0" 2 env CACHEGEN_THREADS=0 "$cg" verify kv.cgkv
check "good CACHEGEN_THREADS" 0 env CACHEGEN_THREADS=2 CACHEGEN_SIMD=scalar "$cg" verify kv.cgkv

# Strict --tokens.
for bad in 0x10:20 1:2:3 " 1:2" +1:+3 "1 :2" 1:2x -1:2 1e1:20 12; do
  check "tokens '$bad'" 2 "$cg" decode kv.cgkv -o x.npy --tokens "$bad"
done
check "tokens 16:20 decimal" 0 "$cg" decode kv.cgkv -o t16.npy --tokens 16:20
check "tokens 0016:20 is 16:20" 0 "$cg" decode kv.cgkv -o t0016.npy --tokens 0016:20
cmp -s t16.npy t0016.npy || { failed=$((failed + 1)); echo "FAIL: 0016:20 differs from 16:20"; }
check "tokens 5:5 empty range" 0 "$cg" decode kv.cgkv -o empty.npy --tokens 5:5
grep -qa "'shape': (1, 2, 0, 2, 8)" empty.npy || { failed=$((failed + 1)); echo "FAIL: 5:5 is not an empty [1, 2, 0, 2, 8] array"; }

# Mistyped store URLs are refused (2), never taken as a directory.
for url in redis:/127.0.0.1:6391 redis//127.0.0.1:6391 redis//127.0.0.1 file:/tmp/x; do
  check "store url '$url'" 2 "$cg" encode kv.npy -o k --store "$url"
done
[[ ! -e redis: && ! -e redis && ! -e file: ]] || { failed=$((failed + 1)); echo "FAIL: a mistyped URL created a directory"; }
# Read-only commands do not create a missing store directory.
check "verify missing store" 3 "$cg" verify k --store "file://$work/nostore"
check "decode missing store" 3 "$cg" decode k -o x.npy --store "file://$work/nostore"
check "store get missing store" 3 "$cg" store get "file://$work/nostore" k -o x.bin
check "store list missing store" 3 "$cg" store list "file://$work/nostore"
[[ ! -e nostore ]] || { failed=$((failed + 1)); echo "FAIL: a read-only command created the store directory"; }
# A link planted in a store directory is not followed.
echo secret >secret.txt
ln -s "$work/secret.txt" "$work/store/planted"
check "store get planted link" 5 "$cg" store get "file://$work/store" planted -o x.bin
[[ ! -e x.bin ]] || { failed=$((failed + 1)); echo "FAIL: a planted link was read"; }

# Outputs: a symlink's target is replaced (the link stays), a FIFO and /dev/null are written
# through, '-' is standard output, a directory is an error.
cp back.npy target.npy
printf 'old' >target.npy
ln -s target.npy link.npy
check "decode -o symlink" 0 "$cg" decode kv.cgkv -o link.npy
[[ -L link.npy ]] || { failed=$((failed + 1)); echo "FAIL: -o symlink replaced the link"; }
cmp -s target.npy back.npy || { failed=$((failed + 1)); echo "FAIL: -o symlink did not write its target"; }
mkfifo out.fifo
timeout 30 cat out.fifo >fifo.npy &  # bounded: a replaced FIFO must not hang the test
reader=$!
check "decode -o fifo" 0 timeout 20 "$cg" decode kv.cgkv -o out.fifo
wait $reader
[[ -p out.fifo ]] || { failed=$((failed + 1)); echo "FAIL: -o fifo replaced the FIFO"; }
cmp -s fifo.npy back.npy || { failed=$((failed + 1)); echo "FAIL: -o fifo did not write through"; }
"$cg" decode kv.cgkv -o - >stdout.npy 2>/dev/null
cmp -s stdout.npy back.npy || { failed=$((failed + 1)); echo "FAIL: -o - did not write standard output"; }
[[ ! -e ./- ]] || { failed=$((failed + 1)); echo "FAIL: -o - created a file named '-'"; }
check "encode -o /dev/null" 0 "$cg" encode kv.npy -o /dev/null --bits 4
[[ -c /dev/null ]] || { failed=$((failed + 1)); echo "FAIL: /dev/null is no longer a character device"; }
mkdir outdir
check "decode -o directory" 2 "$cg" decode kv.cgkv -o outdir
check "decode -o /dev/null" 0 "$cg" decode kv.cgkv -o /dev/null
[[ -c /dev/null ]] || { failed=$((failed + 1)); echo "FAIL: decode replaced /dev/null"; }
ls ./*.tmp.* >/dev/null 2>&1 && { failed=$((failed + 1)); echo "FAIL: temp files left behind"; }

# decode streams: 128 MiB of fp16 output ([8, 2, 16384, 4, 64]) is written in windows, so the
# process never holds it whole (peak RSS well under the output's size), to a file and to a pipe.
# encode streams too: the file is written from the coded blocks (quantized) or wave by wave
# (lossless), never held whole beside them (peak RSS: the input, the coded blocks, a bounded rest).
/usr/bin/python3 - "$cg" <<'PY' || failed=$((failed + 1))
import numpy as np, os, resource, signal, subprocess, sys
cg = sys.argv[1]
t = np.arange(16384, dtype=np.float32)[None, None, :, None, None]
c = np.arange(4 * 64, dtype=np.float32).reshape(1, 1, 1, 4, 64)
kv = (np.sin(t * 0.01 + c) * (1 + c / 64)).astype(np.float16)
kv = np.broadcast_to(kv, (8, 2, 16384, 4, 64)).copy()
np.save("big.npy", kv)
sanitized = bool(os.environ.get("CACHEGEN_SANITIZED"))
# Peak RSS (MiB) of one command alone: measured by a fresh interpreter whose only child it is.
def peak_rss(*args):
    measure = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", measure, cg, *args], check=True,
                         capture_output=True, text=True).stdout
    return int(out.split()[-1]) / 1024
ok = True
in_mib = os.path.getsize("big.npy") / 2**20
for name, opts, rest in (("8 bits", ["--bits", "8"], 24), ("lossless", ["--lossless"], 32)):
    rss = peak_rss("encode", "big.npy", "-o", "enc.cgkv", *opts)
    # The lossless file is not held at all; the quantized one only as the coded blocks.
    held = 0 if opts == ["--lossless"] else os.path.getsize("enc.cgkv") / 2**20
    print(f"encode {name} of 128 MiB input: peak RSS {rss:.0f} MiB, file "
          f"{os.path.getsize('enc.cgkv') / 2**20:.0f} MiB")
    if rss > in_mib + held + rest and not sanitized:
        print(f"FAIL: streaming encode {name}: peak RSS {rss:.0f} MiB > {in_mib:.0f} + {held:.0f} + {rest}")
        ok = False
    if opts == ["--lossless"]:
        subprocess.run([cg, "decode", "enc.cgkv", "-o", "encback.npy"], check=True)
        ok = ok and open("encback.npy", "rb").read() == open("big.npy", "rb").read()
subprocess.run([cg, "encode", "big.npy", "-o", "big.cgkv", "--bits", "2", "--chunk-tokens", "1024"],
               check=True)
rss = peak_rss("decode", "big.cgkv", "-o", "bigback.npy")
back = np.load("bigback.npy")
ok = ok and back.shape == kv.shape and np.abs(back.astype(np.float32) - kv.astype(np.float32)).max() < 1.0
with open("bigpipe.npy", "wb") as f:
    p = subprocess.Popen([cg, "decode", "big.cgkv", "-o", "-"], stdout=subprocess.PIPE)
    while chunk := p.stdout.read(1 << 20):
        f.write(chunk)
    ok = ok and p.wait() == 0
ok = ok and open("bigpipe.npy", "rb").read() == open("bigback.npy", "rb").read()
print(f"decode of 128 MiB output: peak RSS {rss:.0f} MiB")
# A write that fails while the next window decodes (the file size limit reached in the second
# of four windows) fails the command with exit 5 and leaves the existing output as it was.
def size_limit():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (40 << 20, 40 << 20))
before = open("bigback.npy", "rb").read()
p = subprocess.run([cg, "decode", "big.cgkv", "-o", "bigback.npy"], preexec_fn=size_limit,
                   capture_output=True, text=True)
if p.returncode != 5 or "cannot write" not in p.stderr or open("bigback.npy", "rb").read() != before:
    print(f"FAIL: decode past a file size limit: exit {p.returncode}, {p.stderr.strip()}")
    ok = False
# Under a sanitizer (CACHEGEN_SANITIZED) RSS holds shadow memory and quarantined frees: the
# output is still checked, its peak memory is not.
if not ok or (rss > 100 and not sanitized):
    print(f"FAIL: streaming decode (ok={ok}, peak RSS {rss:.0f} MiB of a 128 MiB output)")
    sys.exit(1)
PY
rm -f big.npy big.cgkv bigback.npy bigpipe.npy enc.cgkv encback.npy

# Inputs must be regular files: no endless read of /dev/zero, no blocking on a FIFO.
check "input /dev/zero" 2 timeout 20 "$cg" encode /dev/zero -o x.cgkv
check "input /dev/zero cgkv" 2 timeout 20 "$cg" verify /dev/zero
mkfifo in.fifo
check "input fifo" 2 timeout 20 "$cg" encode in.fifo -o x.cgkv
check "input fifo cgkv" 2 timeout 20 "$cg" inspect in.fifo
check "input directory" 2 "$cg" encode outdir -o x.cgkv
expect_text "input directory" "is a directory"
reject_text "input directory" "basic_filebuf"
check "input directory cgkv" 2 "$cg" verify outdir
check "store put directory" 2 "$cg" store put "file://$work/store" d outdir
check "inspect reports its checks" 0 "$cg" inspect kv.cgkv
expect_text "inspect reports its checks" "checksums"
echo "cli: $passed passed, $failed failed"
[[ $failed == 0 ]]
