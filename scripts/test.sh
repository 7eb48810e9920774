#!/usr/bin/env bash
# Set up, build and run the tests, in parts. With no PART: --asan, --long,
# --tsan and --fuzz, what CI runs (.ci/run; under 40 minutes on 2 cores:
# each stage against its budget in .ci/budget.json). Arguments after `--`
# go to CTest. Which build runs which test is decided by the tests' CTest
# labels (tests/CMakeLists.txt; docs/hardening.md, "Which build runs which
# test"); every test runs in CI in one build or another.
#
#   --release  the whole suite (CTest: unit tests, the gradient, placement
#              and kernel harnesses, MPI tests under both MPIs, the CLI
#              scripts, the documentation, the PyTorch interop checks, the
#              fuzz corpora replayed), plain Release build with gcc in build/:
#              the quick check while working (~13 minutes)
#   --asan     AddressSanitizer + UndefinedBehaviorSanitizer (clang,
#              build-asan/): every test but the `long` and `mpi` ones, and
#              the MPI transport's own suite at 3 ranks under mpirun; any
#              report fails its test
#   --long     Release (clang, build-long/): the `long` end-to-end tests
#              (the documentation, the published runs, the plan budget, the
#              examples, the rendered report) and every MPI test, under
#              OpenMPI's mpirun and (linked against MPICH from the same
#              objects: -DPX_ALSO_MPICH=ON, parallax-mpich, ...) mpiexec.mpich
#   --tsan     ThreadSanitizer (clang, build-tsan/) on the threaded layers:
#              the in-process transport and collectives, the communication
#              engine, the executor across in-process ranks (data, tensor
#              and pipeline parallelism), the parameter server and the
#              serving engine against its HTTP threads; built
#              without ONNX (-DPX_ONNX=OFF), the one build CI makes so
#              (the runtime's tests then check the refusal of an ONNX model)
#   --fuzz[=S] every libFuzzer harness (fuzz/, built in build-asan/) for S
#              seconds each from its checked-in corpus (default 30)
#
# Each stage prints its time against its budget and its ten slowest tests;
# the run ends with every stage, the whole against 40 minutes, and every
# test skipped with its reason (scripts/ci_budget.py).
# docs/hardening.md says what each finds and how long each takes here.
set -euo pipefail
cd "$(dirname "$0")/.."

parts=()
fuzz_seconds=30
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --release | --asan | --long | --tsan) parts+=("${1#--}") ;;
    --fuzz) parts+=(fuzz) ;;
    --fuzz=*) parts+=(fuzz); fuzz_seconds="${1#--fuzz=}" ;;
    --) shift; ctest_args=("$@"); break ;;
    -h | --help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown part '$1' (expected --release, --asan, --long, --tsan, --fuzz[=SECONDS], or -- CTEST_ARGS)" >&2
       exit 2 ;;
  esac
  shift
done
[ ${#parts[@]} -gt 0 ] || parts=(asan long tsan fuzz)
wants() { [[ " ${parts[*]} " == *" $1 "* ]]; }

rm -rf ci-report
budget=(python3 scripts/ci_budget.py)
failed=()
# stage NAME [--suite SUITE --junit FILE] -- COMMAND...: runs it, prints
# its time against the budget; a failure is remembered, and the other
# stages still run (the summary names it).
stage() {
  local name=$1 start=$SECONDS status=0
  shift
  local report=()
  while [ "$1" != "--" ]; do report+=("$1"); shift; done
  shift
  "$@" || status=$?
  "${budget[@]}" stage "$name" $((SECONDS - start)) "${report[@]}" || failed+=("$name (past its budget)")
  ((status == 0)) || failed+=("$name (exit $status)")
  # A build that failed leaves nothing to test.
  if ((status != 0)) && [[ $name == *build ]]; then
    printf 'test.sh: FAILED: %s\n' "${failed[@]}"
    exit 1
  fi
}
# ctest_stage NAME SUITE BUILD_DIR CTEST_ARGS...: a CTest run as a stage,
# started from the suite's measured costs (.ci/costs/SUITE.txt) so the
# costliest tests start first even on a clean clone.
ctest_stage() {
  local name=$1 suite=$2 dir=$3 junit
  shift 3
  junit="$PWD/ci-report/$(tr -cs 'a-zA-Z0-9' '-' <<< "$name" | sed 's/-*$//').xml"  # "asan suite (MPI)": asan-suite-MPI.xml
  mkdir -p ci-report
  "${budget[@]}" seed "$suite" "$dir"
  stage "$name" --suite "$suite" --junit "$junit" -- \
    bash -c 'cd "$1" && shift && ctest --output-on-failure --output-junit "$@"' _ "$dir" "$junit" "$@" "${ctest_args[@]}"
}

stage "setup" -- bash scripts/setup.sh
# The budgets are this project's machine's; a slower one scales them
# (the reference compile's time against theirs, ci_budget.py machine).
"${budget[@]}" machine
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

# A clang build for CI: optimized (-O2) with line tables for reports, and a
# unity build (CMake batches a target's files into one translation unit:
# the headers they share, nlohmann/json and CLI11 above all, are compiled
# once per batch, not once per file).
configure_clang() {  # DIR SANITIZERS [CMAKE_ARGS...]
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_UNITY_BUILD=ON \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only" \
    -DPX_SANITIZE="$2" -DPX_BUILD_BENCH=OFF "${@:3}" > "$1.log" 2>&1 || { cat "$1.log"; exit 1; }
}
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

if wants release; then
  stage "release build" -- bash scripts/build.sh
  ctest_stage "release suite (in-process)" release build --timeout 900 -j"$jobs" -LE "^mpi$"
  # Under a launcher: two ranks or fewer two at a time, more (and timed tests) alone (px_mpi_test).
  ctest_stage "release suite (MPI)" release build --timeout 900 -j"$jobs" -L "^mpi$"
fi

if wants asan || wants fuzz; then
  # One clang tree serves both: ASan+UBSan everywhere, libFuzzer coverage in
  # the libraries that read outside input. One MPI: its suite here checks
  # the transport's memory; both MPIs run in the --long tree.
  configure_clang build-asan address,undefined -DPX_FUZZ=ON -DPX_ALSO_MPICH=OFF
  stage "asan build" -- ninja -C build-asan -j"$jobs"
fi
if wants asan; then
  # Timing bounds in the test scripts stretch by this factor (sanitized
  # processes run 3-10x slower), and their training runs take 12 steps
  # instead of 50: the same code paths, fewer repetitions (--long and
  # --release run them whole).
  export PX_TEST_TIME_SCALE=5 PX_TEST_STEPS=12
  # Every test but the long and MPI ones; then the MPI transport's suite
  # under mpirun, without LeakSanitizer: OpenMPI
  # 4.1 keeps what MPI_Init allocates past MPI_Finalize, in components it
  # has dlclosed by then, so the leaks cannot be told from parallax's by
  # their (unnamed) frames; full unwinding, which names them, made MPI
  # tests 5-10x slower. parallax's own code is leak-checked in process.
  ASAN_OPTIONS="detect_leaks=1" ctest_stage "asan suite" asan build-asan --timeout 1800 -j"$jobs" -LE "^(long|mpi)$"
  ASAN_OPTIONS="detect_leaks=0" ctest_stage "asan suite (MPI)" asan build-asan --timeout 600 -j"$jobs" -L "^asan$"
  unset PX_TEST_TIME_SCALE PX_TEST_STEPS
fi

if wants long; then
  # Release speed: the long end-to-end runs and every MPI test at full
  # length (50 steps), unscaled timing bounds. No sanitizer: UBSan made these
  # 1.6-2.5x slower (the published replays 88 s -> 225 s), and the code they
  # run is under ASan + UBSan in the --asan stage (docs/hardening.md).
  configure_clang build-long "" -DPX_ALSO_MPICH=ON
  stage "long build" -- ninja -C build-long -j"$jobs" px_long_programs
  ctest_stage "long suite" long build-long --timeout 900 -j"$jobs" -L "^(long|mpi)$"
fi

if wants tsan; then
  # Also CI's build without ONNX (-DPX_ONNX=OFF): the engine builds without
  # libonnx, and the runtime's tests include its named refusal of an ONNX model.
  configure_clang build-tsan thread -DPX_ONNX=OFF
  tsan_programs=(px_comm_tests px_comm_engine_tests px_parallel_tests px_runtime_tests px_serve_tests)
  stage "tsan build" -- ninja -C build-tsan -j"$jobs" "${tsan_programs[@]}"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
  # The threaded layers' cases (the `tsan` entries of tests/CMakeLists.txt).
  ctest_stage "tsan suite" tsan build-tsan --timeout 1800 -j"$jobs" -L tsan
fi

if wants fuzz; then
  stage "fuzzing" -- bash scripts/fuzz.sh --seconds "$fuzz_seconds" --jobs "$jobs"
fi

summary=0
"${budget[@]}" summary || summary=$?
if ((${#failed[@]} > 0)); then
  printf 'test.sh: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
exit "$summary"
