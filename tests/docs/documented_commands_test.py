#!/usr/bin/env python3
"""Every command the documentation shows, run as the text says.

The commands are read from the documents themselves, so a command added to
them is run by the next test run without anyone touching this file: every
fenced ```sh block of README.md, examples/README.md and docs/*.md. Every
other block says what it is instead (```text for a transcript, a command
with its output; ```json, ```cpp, ...) and is not run; a fence that names no
language fails the test, so no block of commands escapes it unnoticed. Each
line of a block (continuations joined) is one command, run by bash in
document order in one scratch directory laid out like a checkout: the
parallax under test at ./build/src/cli/parallax and on PATH, examples/
beside it, the local cluster spec in a cache of its own. Commands that need
a file an earlier one made (a checkpoint, plan.json, runs/first) find it
there, as a reader who follows the text does.

A command passes when it exits as the text says: 0, or, for a failure
demonstration whose comment says `fails with "TEXT"`, non-zero with TEXT in
its output. A command of a kind this test has no rule for fails it (so no
documented command is silently skipped), and so does a shortening below that
no command needs any more (so the table stays what the documents need).

The long commands are shortened by the flags the documentation gives for it,
appended (parallax takes a flag's last value), and only these (SHORTENINGS,
also stated in README.md): a training run of more than 60 steps takes 10,
evaluates 2 batches and samples 20 bytes (--steps 10 --eval-batches 2
--sample-tokens 20; --stop-after 5 where it stops early), the image models train
on the first 1,000 training and test images of Fashion-MNIST (a cut that,
like the whole set, ends each epoch with a partial batch), `plan` searches
for at most 3 s, `calibrate` times each kernel for 2 ms, `bench comm` checks
sizes up to 4M (4, 64K and 4M where it names none: its default runs to
256M). The quick start's two scripts: `bash scripts/run.sh` runs as
it is with `--steps 10` (its extra arguments go to `parallax train`) and
`PX_CALIBRATE_ARGS='--kernel-ms 2'` (its calibrations' flags), its build
being the one under test; `bash scripts/test.sh`, the suite this test
is part of, cannot run inside it: its `--help` runs and must name the parts
README.md names.

On a CPU without AVX512_BF16 a command with `--precision bf16` passes
when it refuses by name (its error names "a CPU with AVX512_BF16").

In a build without ONNX (PX_ONNX=OFF in the environment, which CMake sets
from -DPX_ONNX) the commands that need it, every one of docs/onnx.md and
any other that names a .onnx file, are listed as skipped and not run.

--part in-process runs the blocks that launch no MPI; --part mpi runs the
blocks that do (whole, in a fresh scratch directory: CI runs MPI tests one
at a time); both list every command and which part runs it.

usage: documented_commands_test.py --parallax BIN --source DIR --part in-process|mpi [--list]
"""
import argparse
import dataclasses
import gzip
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The binary as the documents spell it: `P=./build/src/cli/parallax`, then
# `$P`, or `parallax` on PATH.
BINARY_PATH = "./build/src/cli/parallax"
PARALLAX_WORDS = {"$P", "parallax", BINARY_PATH}
MPI_LAUNCHERS = {"mpirun", "mpiexec", "mpiexec.mpich", "mpiexec.hydra", "srun"}
LONG_RUN_STEPS = 60  # training runs longer than this are shortened ...
SHORT_RUN_STEPS = 10  # ... to this many steps
IMAGE_CUT = 1000  # Fashion-MNIST images kept per split
FAILS_WITH = re.compile(r'fails with "([^"]+)"')


@dataclasses.dataclass
class Command:
    source: str  # file:line
    block: int  # the fenced block's index among all blocks read
    text: str  # as written, continuations joined, the comment removed
    comment: str
    part: str = ""  # in-process or mpi: the part that runs its block
    kind: str = ""  # what the test knows it as (see classify)
    run: str = ""  # the command line run: text with shortenings
    shortenings: list = dataclasses.field(default_factory=list)


# ---------------------------------------------------------------- extraction


def split_comment(line):
    """A shell line's command and its trailing comment (a `#` that starts a
    word, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def sh_blocks(path):
    """(first line number, lines) of every ```sh block in a Markdown file,
    and the line numbers of fences that name no language."""
    blocks, unlabeled, current, start = [], [], None, 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = re.match(r"^\s*```(\S*)", line)
        if fence and current is None:
            current, start = ([] if fence.group(1) == "sh" else False), number + 1
            if not fence.group(1):
                unlabeled.append(number)
        elif fence:
            if current is not False:
                blocks.append((start, current))
            current = None
        elif current is not None and current is not False:
            current.append(line)
    return blocks, unlabeled


def documents(source):
    """The documents, in the order a reader meets them."""
    paths = [source / "README.md", source / "examples" / "README.md"]
    paths += sorted((source / "docs").glob("*.md"))
    return paths


def extract(source, problems):
    commands, block_index = [], 0
    for path in documents(source):
        name = str(path.relative_to(source))
        blocks, unlabeled = sh_blocks(path)
        for number in unlabeled:
            problems.append(f"{name}:{number}: a fenced block without a language: ```sh for commands (this test "
                            "runs them), ```text for a transcript or anything else not to run")
        for start, lines in blocks:
            pending, pending_line = "", 0
            for offset, line in enumerate(lines):
                if not pending:
                    pending_line = start + offset
                code, comment = split_comment(line)
                if code.endswith("\\"):
                    pending += code[:-1] + " "
                    continue
                text = re.sub(r"\s+", " ", (pending + code).strip())
                pending = ""
                if text:  # (a comment line of its own is a heading inside the block)
                    commands.append(Command(f"{name}:{pending_line}", block_index, text, comment))
            block_index += 1
    return commands


# ------------------------------------------------------------ classification


def segments(text):
    """The simple commands of a line: split at top-level &&, || and ;."""
    parts, quote, current, i = [], None, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif text.startswith("&&", i) or text.startswith("||", i):
            parts.append(current)
            current, i = "", i + 2
            continue
        elif ch == ";":
            parts.append(current)
            current, i = "", i + 1
            continue
        current += ch
        i += 1
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def words_after_environment(segment):
    """The words of a simple command without its leading VAR=value words."""
    words = shlex.split(segment)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
        words = words[1:]
    return words


def parallax_invocation(words):
    """(index of the last parallax word, its subcommand) or (None, None): the
    last, because `parallax launch ... -- mpirun ... $P train` trains."""
    at = [i for i, w in enumerate(words) if w in PARALLAX_WORDS]
    if not at or at[-1] + 1 >= len(words):
        return (at[-1], "") if at else (None, None)
    return at[-1], words[at[-1] + 1]


def classify(command):
    """What the test knows a command as; "" when it has no rule for it."""
    text = command.text
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S+", text):
        # The documents' commands run the tested binary: P names it as they spell it.
        return "assignment" if not text.startswith("P=") or text == "P=" + BINARY_PATH else ""
    kinds = []
    for segment in segments(text):
        words = words_after_environment(segment)
        if not words:
            return ""
        if words[:2] == ["bash", "scripts/run.sh"]:
            kinds.append("run.sh")
        elif words[:2] == ["bash", "scripts/test.sh"]:
            kinds.append("test.sh")
        elif words[0] in PARALLAX_WORDS or words[0] in MPI_LAUNCHERS:
            if parallax_invocation(words)[0] is None:
                return ""
            kinds.append("parallax")
        elif words[:2] == ["mkdir", "-p"]:
            kinds.append("mkdir")
        elif words[0] == "scripts/hosts.sh":
            kinds.append("hosts.sh")
        else:
            return ""
    return "+".join(sorted(set(kinds)))


def launches_mpi(command):
    return any(w in MPI_LAUNCHERS for s in segments(command.text) for w in words_after_environment(s))


# --------------------------------------------------------------- shortenings


def flag_value(words, flag):
    """The last value a flag is given (`--flag V` or `--flag=V`), or None."""
    value = None
    for i, w in enumerate(words):
        if w == flag and i + 1 < len(words):
            value = words[i + 1]
        elif w.startswith(flag + "="):
            value = w[len(flag) + 1:]
    return value


def bytes_of(size):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(size[:-1]) * units[size[-1]] if size[-1:] in units else int(size)


def short_training(words, sub):
    if sub != "train" or (flag_value(words, "--model") or "gpt") != "gpt" or flag_value(words, "--epochs"):
        return None
    steps = flag_value(words, "--steps")
    if steps is not None and int(steps) <= LONG_RUN_STEPS:
        return None
    extra = ["--steps", str(SHORT_RUN_STEPS), "--eval-batches", "2", "--sample-tokens", "20"]
    if flag_value(words, "--stop-after") is not None:
        extra += ["--stop-after", str(SHORT_RUN_STEPS // 2)]
    return extra


def image_cut(words, sub):
    if sub != "train" or flag_value(words, "--model") not in ("mlp", "cnn") or flag_value(words, "--data"):
        return None
    return ["--data", "fashion-mnist-cut"]


def plan_budget(words, sub):
    return ["--budget-s", "3"] if sub == "plan" and flag_value(words, "--budget-s") is None else None


def calibrate_kernels(words, sub):
    return ["--kernel-ms", "2"] if sub == "calibrate" and flag_value(words, "--kernel-ms") is None else None


def bench_sizes(words, sub):
    if sub != "bench" or words[1:2] != ["comm"]:
        return None
    sizes = flag_value(words, "--sizes")
    if sizes is None:  # the default, 4 B..256M by 4x: the smallest, the first size judged, the cap
        return ["--sizes", "4,64K,4M"]
    if max(bytes_of(s) for s in sizes.split(",")) <= 4 << 20:
        return None
    return ["--sizes", ",".join(s if bytes_of(s) <= 4 << 20 else "4M" for s in sizes.split(","))]


# name, what it does (printed with every command it shortens), the rule.
SHORTENINGS = [
    ("steps", f"a training run of more than {LONG_RUN_STEPS} steps takes {SHORT_RUN_STEPS}, evaluates 2 batches and "
              "samples 20 bytes", short_training),
    ("image-cut", f"the image models train on the first {IMAGE_CUT} training and test images", image_cut),
    ("plan-budget", "the planner searches for at most 3 s", plan_budget),
    ("calibrate", "each kernel is timed for 2 ms", calibrate_kernels),
    ("bench-sizes", "collectives are checked on sizes up to 4M", bench_sizes),
]


def shorten(command):
    """The command line to run, and the shortenings it took."""
    if command.kind == "run.sh":
        return (f"PX_CALIBRATE_ARGS='--kernel-ms 2' {command.text} --steps {SHORT_RUN_STEPS}",
                ["run.sh: its training takes 10 steps, its calibration times each kernel for 2 ms"])
    if command.kind == "test.sh":
        return "bash scripts/test.sh --help", ["test.sh: cannot run inside the suite it runs: its --help"]
    if command.kind == "hosts.sh" and not can_make_hosts():
        return "scripts/hosts.sh --help", ["hosts.sh: network namespaces need root and ip netns; its --help"]
    out, used = [], []
    for segment in segments(command.text):
        words = words_after_environment(segment)
        at, sub = parallax_invocation(words)
        if at is not None and "--help" not in words:
            for name, what, rule in SHORTENINGS:
                extra = rule(words[at + 1:], sub)
                if extra:
                    segment += " " + shlex.join(extra)
                    used.append(name)
        out.append(segment)
    # Rejoin with the operators the line had, in order.
    operators = re.findall(r"&&|\|\||;", re.sub(r"'[^']*'|\"[^\"]*\"", "", command.text))
    line = out[0]
    for operator, segment in zip(operators, out[1:]):
        line += (" ; " if operator == ";" else f" {operator} ") + segment
    return line, used


# ------------------------------------------------------------------ running


def can_make_hosts():
    """Whether scripts/hosts.sh can make namespaces here (root, iproute2)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def make_scratch(parallax, source):
    """A directory laid out like a checkout, for the commands to run in."""
    work = Path(tempfile.mkdtemp(prefix="px-docs-"))
    (work / "build/src/cli").mkdir(parents=True)
    (work / BINARY_PATH).symlink_to(Path(parallax).resolve())
    (work / "examples").symlink_to((source / "examples").resolve())
    # The quick start's scripts: run.sh as it is; its build step is the
    # build under test (CTest built parallax before running this).
    (work / "scripts").mkdir()
    shutil.copy(source / "scripts/run.sh", work / "scripts/run.sh")
    (work / "scripts/build.sh").write_text(
        "#!/usr/bin/env bash\n# The documentation test's stand-in: parallax is built already.\n"
        f"test -x {BINARY_PATH}\n")
    shutil.copy(source / "scripts/test.sh", work / "scripts/test.sh")
    shutil.copy(source / "scripts/hosts.sh", work / "scripts/hosts.sh")
    # `--data my.txt` in README.md: a text of the reader's own.
    fortunes = Path("/usr/share/games/fortunes")
    text = b""
    for f in sorted(fortunes.iterdir()) if fortunes.is_dir() else []:
        if f.is_file() and f.suffix not in (".dat", ".u8") and len(text) < 400_000:
            text += f.read_bytes()
    (work / "my.txt").write_bytes(text or b"a text of your own. " * 20000)
    write_image_cut(work / "fashion-mnist-cut")
    return work


def write_image_cut(out, source=Path("/usr/share/datasets/fashion-mnist")):
    """The first IMAGE_CUT images and labels of each split, as IDX files."""
    out.mkdir()
    for split in ("train", "t10k"):
        for kind, header in (("images-idx3", 16), ("labels-idx1", 8)):
            name = f"{split}-{kind}-ubyte"
            path = source / (name + ".gz")
            data = gzip.open(path).read() if path.exists() else (source / name).read_bytes()
            head = bytearray(data[:header])
            struct.pack_into(">I", head, 4, IMAGE_CUT)
            item = 28 * 28 if kind.startswith("images") else 1
            (out / name).write_bytes(bytes(head) + data[header:header + IMAGE_CUT * item])


BF16_REFUSAL = "a CPU with AVX512_BF16"


def cpu_has_bf16():
    """Whether this CPU has AVX512_BF16 (as parallax itself reads it)."""
    try:
        return any(line.startswith("flags") and "avx512_bf16" in line.split()
                   for line in open("/proc/cpuinfo"))
    except OSError:
        return False


def run_one(command, work, env, timeout, log):
    start = time.monotonic()
    process = subprocess.Popen(["bash", "-c", "set -o pipefail; " + command.run], cwd=work, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    seconds = time.monotonic() - start
    text = output.decode(errors="replace")
    log.write_text(text)
    expected = FAILS_WITH.search(command.comment)
    if code is None:
        verdict = f"did not finish within {timeout:.0f} s"
    elif expected:
        verdict = (f"exited 0, the text says it fails with \"{expected.group(1)}\"" if code == 0 else
                   "" if expected.group(1) in text else
                   f"failed (exit {code}) without \"{expected.group(1)}\"")
    elif code != 0 and "--precision bf16" in command.run and not cpu_has_bf16():
        # bf16 training needs AVX512_BF16; on a CPU without it the command
        # must refuse by name (the machine's CPU can change between runs).
        verdict = "" if BF16_REFUSAL in text else f"exit {code} without \"{BF16_REFUSAL}\""
    else:
        verdict = "" if code == 0 else f"exit {code}"
    if not verdict and command.kind == "test.sh":
        missing = [p for p in ("--release", "--asan", "--tsan", "--fuzz") if p not in text]
        verdict = f"--help does not name {', '.join(missing)}" if missing else ""
    return verdict, seconds, text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parallax", required=True)
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("--part", choices=("in-process", "mpi"), required=True)
    parser.add_argument("--list", action="store_true", help="list the commands and their shortenings; run none")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()

    problems = []
    commands = extract(args.source, problems)
    for name in ("README.md", "examples/README.md"):
        if not any(c.source.startswith(name + ":") for c in commands):
            problems.append(f"{name}: no ```sh block with a command (the test reads them)")
    mpi_blocks = {c.block for c in commands if launches_mpi(c)}
    used = set()
    for c in commands:
        c.part = "mpi" if c.block in mpi_blocks else "in-process"
        c.kind = classify(c)
        if not c.kind:
            problems.append(f"{c.source}: no rule runs `{c.text}`: a command of a kind this test does not know "
                            "(tests/docs/documented_commands_test.py: classify)")
            continue
        c.run, c.shortenings = (c.text, []) if c.kind == "assignment" else shorten(c)
        used.update(c.shortenings)
    for name, what, _ in SHORTENINGS:
        if name not in used:
            problems.append(f"the shortening '{name}' ({what}) applies to no documented command: remove it")

    scale = float(os.environ.get("PX_TEST_TIME_SCALE", "1"))
    timeout = 120 * scale
    work = None if args.list else make_scratch(args.parallax, args.source)
    env = dict(os.environ)
    if work:
        env["PATH"] = f"{work / 'build/src/cli'}:{env['PATH']}"
        env["XDG_CACHE_HOME"] = str(work / "cache")
        (work / "logs").mkdir()
    without_onnx = os.environ.get("PX_ONNX") == "OFF"
    skipped = []
    results, total_start, document, assigned = [], time.monotonic(), None, set()
    for n, c in enumerate(commands, 1):
        doc = c.source.split(":")[0]
        if doc != document:  # each document defines its own variables
            document = doc
            for name in assigned:
                env.pop(name, None)
            assigned.clear()
        label = f"[{n}/{len(commands)}] {c.source} ({c.part})"
        shown = c.text + "".join(f"\n      shortened ({s})" for s in c.shortenings)
        if not c.kind:
            print(f"{label} NO RULE  {c.text}", flush=True)
            continue
        if c.kind == "assignment":
            name, value = c.text.split("=", 1)
            env[name] = value
            assigned.add(name)
            print(f"{label} set      {c.text}", flush=True)
            continue
        if args.list or c.part != args.part:
            print(f"{label} {'listed' if args.list else 'other part'}  {shown}"
                  + (f"\n      run as: {c.run}" if c.run != c.text else ""), flush=True)
            continue
        if without_onnx and (doc == "docs/onnx.md" or ".onnx" in c.text):
            skipped.append(c)
            print(f"{label} skipped (this build has no ONNX, -DPX_ONNX=OFF)  {c.text}", flush=True)
            continue
        verdict, seconds, output = run_one(c, work, env, timeout, work / "logs" / f"{n:02d}.txt")
        results.append((c, verdict, seconds))
        print(f"{label} {'ok  ' if not verdict else 'FAIL'} {seconds:6.1f} s  {shown}"
              + (f"\n      run as: {c.run}" if c.run != c.text else ""), flush=True)
        if verdict:
            tail = "\n".join(output.splitlines()[-25:])
            print(f"      {verdict}; its output ended:\n" + "\n".join("        | " + l for l in tail.splitlines()),
                  flush=True)
    ran = [r for r in results if r[0].part == args.part and r[0].kind]
    failed = [r for r in results if r[1]]
    print(f"\n{len(ran)} commands run ({args.part} part) in {time.monotonic() - total_start:.1f} s; "
          f"{len(failed)} failed; {len(skipped)} skipped without ONNX; "
          f"{len(commands) - len(ran) - len(skipped)} set or run by the other part")
    for c, verdict, _ in failed:
        print(f"FAIL {c.source}: {verdict}: {c.text}")
    for p in problems:
        print(f"FAIL {p}")
    if work and any(r[0].kind == "hosts.sh" for r in results) and can_make_hosts():
        # A failed document may have left its hosts up; nothing stays behind.
        subprocess.run(["bash", str(work / "scripts/hosts.sh"), "down"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    if work and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    elif work:
        print(f"scratch directory kept: {work}")
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
