#!/usr/bin/env bash
# Set up, build and run the tests, in parts. With no PART: --asan, --tsan
# and --fuzz (what CI runs, ~36 minutes on 2 cores); name parts to run only
# those. Arguments after `--` go to CTest. Both full suites run every MPI
# test twice: under OpenMPI's mpirun and, linked against MPICH from the
# same objects (-DPX_ALSO_MPICH=ON: parallax-mpich, ...), under
# mpiexec.mpich (tests named *.mpich).
#
#   --release  the whole suite (CTest: unit tests, the gradient, placement
#              and kernel harnesses, MPI tests under both MPIs, the CLI
#              scripts, the PyTorch interop checks, the fuzz corpora
#              replayed), plain Release build with gcc in build/: the quick
#              check while working (~13 minutes)
#   --asan     the same whole suite under AddressSanitizer + UndefinedBehavior-
#              Sanitizer (clang, build-asan/); any report fails its test
#   --tsan     ThreadSanitizer (clang, build-tsan/) on the threaded layers:
#              the in-process transport and collectives, the communication
#              engine, the executor across in-process ranks (data, tensor
#              and pipeline parallelism) and the parameter server
#   --fuzz[=S] every libFuzzer harness (fuzz/, built in build-asan/) for S
#              seconds each from its checked-in corpus (default 30)
#
# docs/hardening.md says what each finds and how long each takes here.
set -euo pipefail
cd "$(dirname "$0")/.."

parts=()
fuzz_seconds=30
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --release | --asan | --tsan) parts+=("${1#--}") ;;
    --fuzz) parts+=(fuzz) ;;
    --fuzz=*) parts+=(fuzz); fuzz_seconds="${1#--fuzz=}" ;;
    --) shift; ctest_args=("$@"); break ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown part '$1' (expected --release, --asan, --tsan, --fuzz[=SECONDS], or -- CTEST_ARGS)" >&2
       exit 2 ;;
  esac
  shift
done
# The whole suite runs under ASan in CI; --release is the same suite without
# the sanitizers, for speed, and would not fit CI's time beside them.
[ ${#parts[@]} -gt 0 ] || parts=(asan tsan fuzz)
wants() { [[ " ${parts[*]} " == *" $1 "* ]]; }

bash scripts/setup.sh
# OpenMPI refuses to run as root without these; tests oversubscribe the 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs="$(nproc)"
# The multi-host tests (tests/hosts/, Hosts.*: network namespaces as hosts)
# run in the MPI stages when this machine can make namespaces; otherwise
# CTest lists them as skipped, and this says why up front.
if [[ $(id -u) == 0 ]] && ip netns list > /dev/null 2>&1; then
  echo "test.sh: the multi-host tests (Hosts.*) run: root and ip netns are available"
else
  echo "test.sh: the multi-host tests (Hosts.*) are SKIPPED: they need root and iproute2's ip netns"
fi
timed() {  # timed NAME COMMAND...: runs it and says how long it took
  local start=$SECONDS
  "${@:2}"
  echo "test.sh: $1 took $((SECONDS - start)) s"
}

# A sanitizer build: clang, optimized (-O2) with line tables for reports,
# and a unity build (CMake batches a target's files into one translation
# unit: the headers they share, nlohmann/json and CLI11 above all, are
# compiled once per batch, not once per file).
configure_sanitized() {  # DIR SANITIZERS [CMAKE_ARGS...]
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_UNITY_BUILD=ON \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only" \
    -DPX_SANITIZE="$2" -DPX_BUILD_BENCH=OFF "${@:3}" > "$1.log" 2>&1 || { cat "$1.log"; exit 1; }
}

if wants release; then
  timed "release build" bash scripts/build.sh
  (cd build && timed "release suite (in-process)" ctest --output-on-failure --timeout 900 -j"$jobs" -E "[Mm]pi" \
     "${ctest_args[@]}")
  # Under mpirun one job at a time: each oversubscribes the cores.
  (cd build && timed "release suite (MPI)" ctest --output-on-failure --timeout 900 -R "[Mm]pi" "${ctest_args[@]}")
fi

if wants asan || wants fuzz; then
  # One clang tree serves both: ASan+UBSan everywhere, libFuzzer coverage in
  # the libraries that read outside input.
  configure_sanitized build-asan address,undefined -DPX_FUZZ=ON -DPX_ALSO_MPICH=ON
  timed "asan build" ninja -C build-asan -j"$jobs"
fi
if wants asan; then
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  # Timing bounds in the MPI test scripts stretch by this factor (sanitized
  # processes oversubscribing two cores run 3-10x slower), and their training
  # runs take 12 steps instead of 50: the same code paths, fewer repetitions
  # (--release runs them whole).
  export PX_TEST_TIME_SCALE=5 PX_TEST_STEPS=12
  (cd build-asan && ASAN_OPTIONS="detect_leaks=1" timed "asan suite (in-process)" \
     ctest --output-on-failure --timeout 1800 -j"$jobs" -E "[Mm]pi" "${ctest_args[@]}")
  # Under mpirun and mpiexec.mpich, one job at a time (each oversubscribes
  # the cores), and without LeakSanitizer: OpenMPI 4.1 keeps what MPI_Init
  # allocates past MPI_Finalize, in components it has dlclosed by then, so
  # the leaks cannot be told from parallax's by their (unnamed) frames; full
  # unwinding, which names them, made these tests 5-10x slower. parallax's
  # own code is leak-checked by the in-process run above (all but the MPI
  # transport).
  (cd build-asan && ASAN_OPTIONS="detect_leaks=0" timed "asan suite (MPI)" \
     ctest --output-on-failure --timeout 1800 -R "[Mm]pi" "${ctest_args[@]}")
fi

if wants tsan; then
  configure_sanitized build-tsan thread
  tsan_programs=(px_comm_tests px_comm_engine_tests px_parallel_tests px_runtime_tests)
  timed "tsan build" ninja -C build-tsan -j"$jobs" "${tsan_programs[@]}"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
  # The threaded layers' cases (the `tsan` entries of tests/CMakeLists.txt).
  (cd build-tsan && timed "tsan suite" ctest --output-on-failure --timeout 1800 -j"$jobs" -L tsan "${ctest_args[@]}")
fi

if wants fuzz; then
  timed "fuzzing" bash scripts/fuzz.sh --seconds "$fuzz_seconds" --jobs "$jobs"
fi
