#!/usr/bin/env python3
"""Measure how many of libtorch's own C++ API test cases compile and pass against troupe.

Takes a directory of libtorch-spelled GoogleTest files (PyTorch's test/cpp/api/*.cpp, plus any
headers they include from test/cpp/api, e.g. optim_baseline.h), and for each file:

  1. rewrites it as a libtorch user porting to troupe would: `torch::` -> `troupe::`,
     `TORCH_X` macros -> `TROUPE_X`, every <torch/...>, <ATen/...>, <c10/...> include -> troupe's
     umbrella header, and test/cpp/api/support.h -> scripts/libtorch_sample/support.h (troupe's own
     stand-in helpers). A prelude (precompiled) adds `namespace torch = troupe;`. Line numbers are
     kept. `at::` and `c10::` are left alone unless --map-at-c10 is given;
  2. splits it into TEST/TEST_F cases (brace matching on a comment/string-blanked copy);
  3. compiles it with g++ -fsyntax-only, attributing each error to the case whose lines contain
     it (or whose line a template backtrace / macro expansion points into). Failing cases are cut
     (blanked, line numbers kept); an error outside every case cuts the top-level declaration that
     holds it (a helper struct or function), and the cases that used it fail in the next round.
     Rounds repeat until the file is clean;
  4. compiles and links the rest against troupe's libraries and GoogleTest (flags read from the
     build directory: compile_commands.json and build.ninja), runs the binary with a timeout
     (restarting after a crash or hang, without the cases already seen) and counts the results.

Cases whose name contains "CUDA" (libtorch's *_CUDA / *_MultiCUDA) are compiled but not counted
or run. Output: a table per file and area, totals, and the most common first compile errors.

Usage:
  python3 scripts/libtorch_sample.py SAMPLE_DIR [--build build] [--work DIR] [--files a.cpp,b.cpp]
      [--markdown OUT.md] [--json OUT.json] [--jobs 1] [--run-timeout 300] [--map-at-c10]
Python 3 standard library only; needs g++ and a configured, built troupe tree (-DTROUPE_BUILD_TESTS=ON).
"""

import argparse
import bisect
import collections
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(SCRIPT_DIR)
SUPPORT_DIR = os.path.join(SCRIPT_DIR, "libtorch_sample")

# Which API area a test file belongs to (for the per-area figures). Unlisted files are "other".
AREAS = {
    "tensor": ["tensor", "tensor_indexing", "tensor_options", "operations", "special", "tensor_flatten"],
    "autograd": ["autograd", "grad_mode", "inference_mode"],
    "nn modules & functional": ["modules", "module", "functional", "init", "nn_utils", "rnn",
                                 "transformer", "enum", "expanding-array"],
    "containers & OrderedDict": ["sequential", "moduledict", "modulelist", "parameterdict",
                                  "parameterlist", "any", "ordered_dict"],
    "optim": ["optim"],
    "serialize": ["serialize"],
    "data": ["dataloader"],
    "misc": ["misc", "memory", "namespace", "static", "integration", "torch_include"],
}
FILE_AREA = {f: a for a, fs in AREAS.items() for f in fs}

# g++ quotes with plain ' in the C locale (the error texts are grouped by it)
C_LOCALE = dict(os.environ, LC_ALL="C", LANG="C", LANGUAGE="")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Source handling
# --------------------------------------------------------------------------------------------

def mask_source(text):
    """A copy of text with comments, string and char literals replaced by spaces (newlines kept),
    and preprocessor lines blanked, so braces and TEST( can be found on the code alone."""
    out = list(text)
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#" :
            # preprocessor directive, with continuation lines
            j = i
            while j < n:
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                j += 1
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        m = re.match(r'(?:u8|u|U|L)?R"([^(\s]*)\(', text[i:i + 40])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c == '"' or (c == "'" and not (i > 0 and (text[i - 1].isalnum()))):  # 1'000 digit separators
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        i += 1
    return "".join(out)


INCLUDE_RE = re.compile(r'^(\s*#\s*include\s*)[<"]([^>"]+)[>"]', re.M)


def rewrite(text, local_headers, map_at_c10):
    """The libtorch -> troupe rename, keeping every line where it was."""
    def fix_include(m):
        path = m.group(2)
        base = os.path.basename(path)
        if re.match(r"test/cpp/(api|common)/", path):
            if base == "support.h":
                return m.group(1) + '"support.h"'
            return m.group(1) + '"%s"' % base
        if base in local_headers and "/" not in path:
            return m.group(0)
        if re.match(r"(torch|ATen|c10|caffe2)/", path):
            return m.group(1) + "<troupe/troupe.h>"
        return m.group(0)

    text = INCLUDE_RE.sub(fix_include, text)
    text = re.sub(r"\bnamespace\s+torch\b", "namespace troupe", text)
    text = re.sub(r"\btorch::", "troupe::", text)
    text = re.sub(r"\bTORCH_([A-Z0-9_]+)\b", r"TROUPE_\1", text)
    if map_at_c10:
        text = re.sub(r"(?<![\w:])(at|c10)::", "troupe::", text)
    return text


class Case:
    def __init__(self, suite, name, start, end, start_line, end_line):
        self.suite, self.name = suite, name
        self.start, self.end = start, end  # char offsets [start, end)
        self.start_line, self.end_line = start_line, end_line
        self.cuda = "CUDA" in name or "CUDA" in suite
        self.compile_error = None  # first error (normalised text) when it does not compile
        self.compile_error_raw = None
        self.result = None  # pass / fail / crash / timeout / skipped / not-run
        self.failure = None

    @property
    def full(self):
        return "%s.%s" % (self.suite, self.name)


TEST_RE = re.compile(r"(?m)^[ \t]*TEST(?:_F|_P)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*\{")


def match_brace(masked, open_pos):
    depth = 0
    for i in range(open_pos, len(masked)):
        c = masked[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(masked)


def line_of(text, offset, _cache={}):
    """1-based line of a char offset (line starts cached per text)."""
    starts = _cache.get(text)
    if starts is None:
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        _cache[text] = starts
    return bisect.bisect_right(starts, offset)


def find_cases(text, masked):
    cases = []
    for m in TEST_RE.finditer(masked):
        open_pos = m.end() - 1
        end = match_brace(masked, open_pos)
        cases.append(Case(m.group(1), m.group(2), m.start(), end, line_of(text, m.start()),
                          line_of(text, max(end - 1, m.start()))))
    return cases


def top_level_units(text, masked):
    """(start, end) char ranges of the top-level declarations (namespace bodies looked into)."""
    units = []
    stack = []  # True for a namespace / extern "C" brace, False for any other
    start = None
    i, n = 0, len(masked)

    def blk_depth():
        return sum(1 for s in stack if not s)

    while i < n:
        c = masked[i]
        if start is None and not c.isspace():
            start = i
        if c == "{":
            head = masked[start:i] if start is not None else ""
            is_ns = blk_depth() == 0 and re.match(r"\s*((inline\s+)?namespace\b[\w\s:]*|extern\s*)$", head) is not None
            stack.append(is_ns)
            if is_ns:
                start = None
        elif c == "}":
            was_ns = stack.pop() if stack else False
            if was_ns:
                start = None
            elif blk_depth() == 0:
                j = i + 1
                while j < n and masked[j].isspace():
                    j += 1
                if j < n and masked[j] == ";":
                    i = j
                if start is not None:
                    units.append((start, i + 1))
                start = None
        elif c == ";" and blk_depth() == 0:
            if start is not None:
                units.append((start, i + 1))
            start = None
        i += 1
    return units


def blank(text, ranges):
    if not ranges:
        return text
    out = list(text)
    for a, b in ranges:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------------

DIAG_RE = re.compile(r"^(.*?):(\d+):(\d+): (error|fatal error|warning|note): (.*)$")
CTX_LOC_RE = re.compile(r"^(.*?):(\d+):(\d+):\s+(required from|recursively required from|in '?constexpr'? expansion|required by substitution)(.*)$")
HEADER_RE = re.compile(r"^(.*?): (In |At global scope|In instantiation)(.*)$")
INCLUDED_RE = re.compile(r"^(?:In file included from|\s+from) (.*?):(\d+)[:,]")
MACRO_NOTE_RE = re.compile(r"in expansion of macro '(\w+)'")
TESTBODY_RE = re.compile(r"(\w+)_Test::TestBody")


def parse_diagnostics(output):
    """A list of errors: dict(path, line, msg, ctx=[(path, line)], macro=[(path, line)], func)."""
    errors = []
    ctx, func = [], None
    cur = None
    for raw in output.splitlines():
        line = raw.rstrip()
        m = DIAG_RE.match(line)
        if m and m.group(4) in ("error", "fatal error"):
            cur = dict(path=m.group(1), line=int(m.group(2)), msg=m.group(5), ctx=list(ctx), macro=[], notes=[], func=func)
            errors.append(cur)
            continue
        if m and m.group(4) == "note":
            mm = MACRO_NOTE_RE.search(m.group(5))
            if cur is not None:
                cur["macro" if mm else "notes"].append((m.group(1), int(m.group(2))))
            continue
        if m:  # warning
            continue
        m = CTX_LOC_RE.match(line)
        if m:
            ctx.append((m.group(1), int(m.group(2))))
            continue
        m = INCLUDED_RE.match(line)
        if m:
            if line.startswith("In file included"):
                ctx, func = [], None
            ctx.append((m.group(1), int(m.group(2))))
            continue
        m = HEADER_RE.match(line)
        if m:
            # a new context: keep include lines, drop the previous instantiation chain
            ctx = []
            tb = TESTBODY_RE.search(line)
            func = tb.group(1) + "_Test" if tb else None
            continue
    return errors


def normalise(msg):
    """Error text grouped across cases: no template arguments, no aka's, no argument lists."""
    s = msg
    s = re.sub(r"\s*\[with [^\]]*\]+", "", s)
    s = re.sub(r"\s*\{aka [^}]*\}", "", s)
    s = re.sub(r"; did you mean .*$", "", s)
    s = re.sub(r"'\{[^']*\}'", "'{...}'", s)
    # argument lists of calls and candidates: f(int, double) -> f(...)
    prev = None
    while prev != s:
        prev = s
        s = re.sub(r"\(([^()']*)\)(?=[^']*')", "(...)", s)
    s = re.sub(r"'(\w+)'(?= was not declared)", r"'\1'", s)
    s = re.sub(r"\b\d+\b", "N", s) if "ExpandingArray" not in s else s
    s = re.sub(r"\s+", " ", s).strip()
    return s[:220]


# --------------------------------------------------------------------------------------------
# Toolchain: flags and libraries from the build directory
# --------------------------------------------------------------------------------------------

class Toolchain:
    def __init__(self, build_dir, jobs):
        self.build = os.path.abspath(build_dir)
        self.jobs = jobs
        include_root = os.path.join(self.build, "include")
        if not os.path.exists(os.path.join(include_root, "troupe", "troupe.h")):
            sys.exit("no %s/troupe/troupe.h: configure troupe first (cmake -S . -B %s ...)" % (include_root, build_dir))
        cc_path = os.path.join(self.build, "compile_commands.json")
        entries = json.load(open(cc_path))
        pick = None
        for e in entries:
            f = e.get("file", "")
            if "/tests/" in f and f.endswith("_test.cpp"):
                pick = e
                break
        if pick is None:
            sys.exit("%s has no tests/*_test.cpp entry: configure with -DTROUPE_BUILD_TESTS=ON" % cc_path)
        args = pick["arguments"] if "arguments" in pick else shlex.split(pick["command"])
        self.cxx = args[0]
        if os.path.basename(self.cxx) in ("ccache", "sccache"):
            args = args[1:]
            self.cxx = args[0]
        flags = []
        skip = False
        for a in args[1:]:
            if skip:
                skip = False
                continue
            if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
                skip = a != "-c"
                continue
            if a == pick["file"] or a.endswith(".cpp"):
                continue
            if a.startswith("-O") or a.startswith("-W") or a in ("-g", "-MD", "-MMD"):
                continue
            if a.startswith("-I") and ("/tests" in a):
                continue
            if a.startswith("-DTROUPE_FIXTURES_DIR"):
                continue
            flags.append(a)
        # -isystem takes the next word; they were kept in order above
        self.cflags = flags + ["-O0", "-g0", "-w", "-fdiagnostics-color=never", "-fno-diagnostics-show-caret",
                               "-fno-diagnostics-show-line-numbers", "-ftemplate-backtrace-limit=0"]
        self.libs, self.link_flags = self._link_line()

    def _link_line(self):
        ninja = open(os.path.join(self.build, "build.ninja")).read()
        blocks = re.findall(r"(?ms)^build tests/\w+_tests[ :].*?\n(.*?)(?=^\S|\Z)", ninja)
        best, best_n, all_libs = None, -1, []
        for b in blocks:
            m = re.search(r"^\s*LINK_LIBRARIES = (.*)$", b, re.M)
            if not m:
                continue
            libs = shlex.split(m.group(1))
            n_troupe = len([l for l in libs if "libtroupe_" in l])
            if n_troupe > best_n:
                best, best_n = b, n_troupe
            all_libs.append(libs)
        if best is None:
            sys.exit("build.ninja has no tests/*_tests link line: configure with -DTROUPE_BUILD_TESTS=ON")
        troupe_libs = sorted(glob.glob(os.path.join(self.build, "*", "libtroupe_*.a")))
        others, seen = [], set()
        for libs in all_libs:
            for l in libs:
                if "libtroupe_" in l:
                    continue
                p = l if os.path.isabs(l) or l.startswith("-") else os.path.join(self.build, l)
                if p not in seen:
                    seen.add(p)
                    others.append(p)
        link_path = re.search(r"^\s*LINK_PATH = (.*)$", best, re.M)
        lflags = shlex.split(link_path.group(1)) if link_path else []
        if not troupe_libs:
            sys.exit("no libtroupe_*.a under %s: build the libraries first" % self.build)
        libs = ["-Wl,--start-group"] + troupe_libs + ["-Wl,--end-group"] + others
        return libs, lflags

    def build_libraries(self):
        out = subprocess.run(["ninja", "-C", self.build, "-t", "targets", "all"], capture_output=True, text=True).stdout
        targets = sorted(set(re.findall(r"^(troupe_\w+): phony", out, re.M)))
        log("building %s (-j%d)" % (" ".join(targets), self.jobs))
        r = subprocess.run(["ninja", "-C", self.build, "-j%d" % self.jobs] + targets)
        if r.returncode != 0:
            sys.exit("the troupe libraries did not build")

    def run(self, argv, timeout=1800):
        t0 = time.time()
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace", env=C_LOCALE)
            return p.returncode, p.stdout + p.stderr, time.time() - t0
        except subprocess.TimeoutExpired:
            return 124, "timeout after %ds" % timeout, time.time() - t0


# --------------------------------------------------------------------------------------------
# One file
# --------------------------------------------------------------------------------------------

class SampleFile:
    def __init__(self, path, workdir, tc, headers, args):
        self.path = path
        self.name = os.path.basename(path)
        self.stem = os.path.splitext(self.name)[0]
        self.area = FILE_AREA.get(self.stem, "other")
        self.work = workdir
        self.tc = tc
        self.args = args
        self.headers = headers  # basename -> rewritten text (shared, in workdir/src)
        self.text = rewrite(open(path, errors="replace").read(), set(headers), args.map_at_c10)
        self.masked = mask_source(self.text)
        self.cases = find_cases(self.text, self.masked)
        self.units = top_level_units(self.text, self.masked)
        self.src = os.path.join(workdir, "src", self.name)
        self.file_errors = []  # errors outside every case: (message, what was cut)
        self.link_error = None
        self.notes = []
        self.bisections = 0

    def case_at_line(self, line):
        for c in self.cases:
            if c.start_line <= line <= c.end_line:
                return c
        return None

    def unit_at_line(self, line):
        for u in self.units:
            if line_of(self.text, u[0]) <= line <= line_of(self.text, max(u[1] - 1, u[0])):
                return u
        return None

    def _same(self, p):
        return os.path.abspath(p) == self.src

    def compile_flags(self):
        pch_dir = os.path.join(self.work, "pch")
        return self.tc.cflags + ["-I", pch_dir, "-I", os.path.join(self.work, "src"), "-include",
                                 os.path.join(pch_dir, "prelude.h")]

    def write(self, cut_ranges, header_cuts):
        with open(self.src, "w") as f:
            f.write(blank(self.text, cut_ranges))
        for h, (text, masked) in self.headers.items():
            with open(os.path.join(self.work, "src", h), "w") as f:
                f.write(blank(text, header_cuts.get(h, [])))

    def attribute(self, err):
        """(case or None, ('unit', (a, b)) / ('header', name, (a, b)) / None)."""
        cands = []
        if self._same(err["path"]):
            cands.append(err["line"])
        macro = [l for p, l in err["macro"] if self._same(p)]
        ctx = [l for p, l in err["ctx"] if self._same(p)]
        for line in cands + macro[::-1] + ctx[::-1]:
            c = self.case_at_line(line)
            if c is not None:
                return c, None
        # last resort: a note that points into a case (e.g. "because the following virtual
        # functions are pure within 'X'" for a class X of the case, instantiated from troupe)
        notes = [l for p, l in err["notes"] if self._same(p)]
        if not cands and not macro and not ctx:
            for line in notes:
                c = self.case_at_line(line)
                if c is not None:
                    return c, None
        if err.get("func"):
            for c in self.cases:
                if "%s_%s_Test" % (c.suite, c.name) == err["func"]:
                    return c, None
        for line in cands + macro[::-1] + ctx[::-1] + (notes if not cands and not macro and not ctx else []):
            u = self.unit_at_line(line)
            if u is not None:
                return None, ("unit", u)
        base = os.path.basename(err["path"])
        if os.path.dirname(os.path.abspath(err["path"])) == os.path.join(self.work, "src") and base in self.headers:
            text, masked = self.headers[base]
            for u in top_level_units(text, masked):
                if line_of(text, u[0]) <= err["line"] <= line_of(text, max(u[1] - 1, u[0])):
                    return None, ("header", base, u)
        return None, None

    def compile_cases(self):
        """Syntax rounds until clean; returns the cut ranges of the source and of the headers."""
        cut, header_cuts, cut_units = [], {}, set()
        failed = set()
        for rnd in range(1, self.args.max_rounds + 1):
            self.write(cut, header_cuts)
            rc, out, secs = self.tc.run([self.tc.cxx] + self.compile_flags() + ["-fmax-errors=0", "-fsyntax-only", self.src])
            errors = parse_diagnostics(out)
            log("  %s: syntax round %d: %d errors (%.0fs)" % (self.name, rnd, len(errors), secs))
            if rc == 0 and not errors:
                return cut, header_cuts, True
            if not errors:
                # failed without a parsable error (a crash of the compiler, a timeout)
                self.notes.append("compiler failed without an error line (rc %d): %s" % (rc, out.strip()[-300:]))
                return cut, header_cuts, False
            progress = False
            for err in errors:
                case, where = self.attribute(err)
                if case is not None:
                    if id(case) not in failed:
                        failed.add(id(case))
                        case.compile_error_raw = err["msg"]
                        case.compile_error = normalise(err["msg"])
                        cut.append((case.start, case.end))
                        progress = True
                elif where is not None:
                    key = where[1:] if where[0] == "header" else where[1]
                    key = (where[0],) + (tuple(key) if where[0] == "header" else key)
                    if key not in cut_units:
                        cut_units.add(key)
                        what = ("%s lines %d-%d" % (self.name, line_of(self.text, where[1][0]), line_of(self.text, where[1][1] - 1))
                                if where[0] == "unit" else "%s (a declaration)" % where[1])
                        self.file_errors.append((normalise(err["msg"]), what))
                        if where[0] == "unit":
                            cut.append(where[1])
                        else:
                            header_cuts.setdefault(where[1], []).append(where[2])
                        progress = True
                else:
                    if not any(e[1] == "unattributed" and e[0] == normalise(err["msg"]) for e in self.file_errors):
                        self.file_errors.append((normalise(err["msg"]), "unattributed"))
            if not progress:
                culprit = self.bisect_unplaced(cut, header_cuts, failed, errors)
                if culprit is not None:
                    case, msg = culprit
                    failed.add(id(case))
                    case.compile_error_raw = msg
                    case.compile_error = normalise(msg)
                    cut.append((case.start, case.end))
                    self.notes.append("%s: its error (%s) points at no line of the file (an instantiation from a "
                                      "troupe header); found by bisection" % (case.full, normalise(msg)[:120]))
                    continue
                # errors that cannot be placed: every remaining case fails with the first of them
                msg = normalise(errors[0]["msg"])
                for c in self.cases:
                    if id(c) not in failed:
                        c.compile_error = "file-level: " + msg
                        c.compile_error_raw = errors[0]["msg"]
                self.notes.append("file-level errors that cut no declaration; every remaining case counted as failing")
                return cut, header_cuts, False
        for c in self.cases:
            if id(c) not in failed:
                c.compile_error = "file-level: still failing after %d rounds" % self.args.max_rounds
        return cut, header_cuts, False

    def unplaced(self, errors):
        return [e for e in errors if self.attribute(e) == (None, None)]

    def bisect_unplaced(self, cut, header_cuts, failed, errors):
        """Errors that point at no line of the file (a template instantiated from a troupe header,
        reached from some case): find the first case whose removal makes one of them go away, by
        bisection over the remaining cases. Returns (case, message) or None."""
        bad = self.unplaced(errors)
        if not bad or self.bisections >= self.args.max_bisections:
            return None
        self.bisections += 1
        remaining = [c for c in self.cases if id(c) not in failed]

        def count_with_prefix_cut(p):
            self.write(cut + [(c.start, c.end) for c in remaining[:p]], header_cuts)
            rc, out, secs = self.tc.run([self.tc.cxx] + self.compile_flags() + ["-fmax-errors=0", "-fsyntax-only", self.src])
            return len(self.unplaced(parse_diagnostics(out)))

        n0 = len(bad)
        if not remaining or count_with_prefix_cut(len(remaining)) >= n0:
            return None
        lo, hi = 1, len(remaining)  # the smallest prefix whose cut lowers the count is in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if count_with_prefix_cut(mid) < n0:
                hi = mid
            else:
                lo = mid + 1
        log("  %s: bisected an unplaced error to %s" % (self.name, remaining[lo - 1].full))
        return remaining[lo - 1], bad[0]["msg"]

    def build_binary(self, cut, header_cuts):
        obj = os.path.join(self.work, "obj", self.stem + ".o")
        exe = os.path.join(self.work, "bin", self.stem)
        for attempt in range(4):
            self.write(cut, header_cuts)
            rc, out, secs = self.tc.run([self.tc.cxx] + self.compile_flags() + ["-c", self.src, "-o", obj])
            log("  %s: compile (%.0fs) rc %d" % (self.name, secs, rc))
            if rc != 0:
                self.notes.append("compile -c failed after a clean syntax check: " + out.strip()[-300:])
                return None
            rc, out, secs = self.tc.run([self.tc.cxx, obj, "-o", exe] + self.tc.link_flags + self.tc.libs + ["-fopenmp", "-pthread"])
            log("  %s: link (%.0fs) rc %d" % (self.name, secs, rc))
            if rc == 0:
                return exe
            # undefined references: cut the cases whose TestBody needs them
            bad = {}
            func = None
            for line in out.splitlines():
                m = re.search(r"in function `([^']*)'", line)
                if m:
                    func = m.group(1)
                m2 = re.search(r"undefined reference to `([^']*)'", line)
                if m2:
                    case = None
                    if func:
                        tb = TESTBODY_RE.search(func)
                        if tb:
                            for c in self.cases:
                                if "%s_%s_Test" % (c.suite, c.name) == tb.group(1) + "_Test":
                                    case = c
                    key = id(case) if case else None
                    bad.setdefault(key, (case, m2.group(1)))
            progressed = False
            for key, (case, sym) in bad.items():
                if case is not None and case.compile_error is None:
                    case.compile_error = normalise("link: undefined reference to '%s'" % sym)
                    case.compile_error_raw = "undefined reference to " + sym
                    cut.append((case.start, case.end))
                    progressed = True
            if None in bad or not progressed:
                sym = (bad.get(None) or next(iter(bad.values()), (None, out.strip()[-200:])))[1]
                self.link_error = "link: undefined reference to '%s'" % sym
                for c in self.cases:
                    if c.compile_error is None:
                        c.compile_error = normalise("link (file-level): undefined reference to '%s'" % sym)
                        c.compile_error_raw = self.link_error
                return None
        return None

    def run_binary(self, exe):
        todo = [c for c in self.cases if c.compile_error is None and not c.cuda]
        by_name = {c.full: c for c in todo}
        seen = set()
        rundir = os.path.join(self.work, "run", self.stem)
        os.makedirs(rundir, exist_ok=True)
        for attempt in range(len(todo) + 1):
            left = [c for c in todo if c.full not in seen]
            if not left:
                break
            neg = ":".join(sorted(seen) + ["*CUDA*"])
            argv = [exe, "--gtest_filter=*-" + neg, "--gtest_color=no"]
            t0 = time.time()
            try:
                p = subprocess.run(argv, cwd=rundir, capture_output=True, text=True, errors="replace",
                                   timeout=self.args.run_timeout)
                out, rc, timed_out = p.stdout + p.stderr, p.returncode, False
            except subprocess.TimeoutExpired as e:
                out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
                rc, timed_out = 124, True
            running, buf = None, []
            for line in out.splitlines():
                m = re.match(r"^\[ RUN      \] (\S+)", line)
                if m:
                    running, buf = m.group(1), []
                    continue
                m = re.match(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] (\S+?)(?: \(|$)", line)
                if m and m.group(2) in by_name and m.group(2) not in seen and m.group(2) == running:
                    c = by_name[m.group(2)]
                    c.result = {"OK": "pass", "FAILED": "fail", "SKIPPED": "skipped"}[m.group(1)]
                    if c.result == "fail":
                        c.failure = "\n".join(l for l in buf if l.strip())[:600]
                    seen.add(c.full)
                    running = None
                    continue
                if running:
                    buf.append(line)
            if running and running in by_name and running not in seen:
                c = by_name[running]
                c.result = "timeout" if timed_out else "crash"
                c.failure = ("rc %d; " % rc) + "\n".join(l for l in buf if l.strip())[-600:]
                seen.add(running)
                continue
            if rc == 0 or not running:
                break
        for c in todo:
            if c.result is None:
                c.result = "not-run"


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def summarise(files):
    rows = []
    for f in files:
        counted = [c for c in f.cases if not c.cuda]
        rows.append(dict(file=f.name, area=f.area, cases=len(counted),
                         compile=sum(1 for c in counted if c.compile_error is None),
                         passed=sum(1 for c in counted if c.result == "pass"),
                         failed=sum(1 for c in counted if c.result in ("fail",)),
                         crashed=sum(1 for c in counted if c.result in ("crash", "timeout", "not-run")),
                         cuda=len(f.cases) - len(counted)))
    return rows


def pct(a, b):
    return "%d%%" % round(100.0 * a / b) if b else "-"


def markdown(files, meta, top):
    rows = summarise(files)
    out = []
    out.append("| file | area | cases | compile | pass | fail | crash/timeout | CUDA (not counted) |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        out.append("| %s | %s | %d | %d | %d | %d | %d | %d |" % (r["file"], r["area"], r["cases"], r["compile"], r["passed"],
                                                          r["failed"], r["crashed"], r["cuda"]))
    tot = {k: sum(r[k] for r in rows) for k in ("cases", "compile", "passed", "failed", "crashed", "cuda")}
    out.append("| **total** | | **%d** | **%d** (%s) | **%d** (%s) | %d | %d | %d |" % (
        tot["cases"], tot["compile"], pct(tot["compile"], tot["cases"]), tot["passed"], pct(tot["passed"], tot["cases"]),
        tot["failed"], tot["crashed"], tot["cuda"]))
    out.append("")
    out.append("| area | cases | compile | pass |")
    out.append("|---|---:|---:|---:|")
    by_area = collections.OrderedDict()
    for r in rows:
        a = by_area.setdefault(r["area"], [0, 0, 0])
        a[0] += r["cases"]; a[1] += r["compile"]; a[2] += r["passed"]
    for a, (n, c, p) in by_area.items():
        out.append("| %s | %d | %d (%s) | %d (%s) |" % (a, n, c, pct(c, n), p, pct(p, n)))
    out.append("")
    groups = collections.Counter()
    example = {}
    for f in files:
        for c in f.cases:
            if c.compile_error and not c.cuda:
                groups[c.compile_error] += 1
                example.setdefault(c.compile_error, "%s %s" % (f.name, c.full))
    out.append("First compile error of each failing case, grouped (top %d of %d groups):" % (min(top, len(groups)), len(groups)))
    out.append("")
    out.append("| cases | first error | e.g. |")
    out.append("|---:|---|---|")
    for msg, n in groups.most_common(top):
        out.append("| %d | `%s` | %s |" % (n, msg.replace("|", "\\|").replace("`", "'"), example[msg]))
    out.append("")
    fe = [(f.name, m, w) for f in files for m, w in f.file_errors]
    if fe:
        out.append("Errors outside every case (the declaration holding each was cut; cases using it then fail):")
        out.append("")
        for name, m, w in fe:
            out.append("- %s: `%s` (%s)" % (name, m.replace("`", "'"), w))
        out.append("")
    notes = [(f.name, n) for f in files for n in f.notes]
    if notes:
        out.append("Notes:")
        out.append("")
        for name, n in notes:
            out.append("- %s: %s" % (name, n.replace("\n", " ")[:300]))
        out.append("")
    return "\n".join(out), tot


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sample_dir", help="directory of libtorch test files (test/cpp/api/*.cpp and their headers)")
    ap.add_argument("--build", default=os.path.join(REPO_ROOT, "build"), help="configured troupe build dir (default: build)")
    ap.add_argument("--work", default="/tmp/libtorch_sample_work", help="scratch directory (recreated)")
    ap.add_argument("--files", default="", help="comma-separated file names to measure (default: every .cpp)")
    ap.add_argument("--exclude", default="support.cpp", help="comma-separated file names to skip")
    ap.add_argument("--jobs", type=int, default=1, help="ninja -j for building the libraries")
    ap.add_argument("--no-build-libs", action="store_true", help="do not run ninja on the troupe libraries first")
    ap.add_argument("--max-rounds", type=int, default=20, help="syntax rounds per file")
    ap.add_argument("--max-bisections", type=int, default=12, help="cases found by bisection per file")
    ap.add_argument("--run-timeout", type=int, default=300, help="seconds per run of a test binary")
    ap.add_argument("--no-run", action="store_true", help="only compile")
    ap.add_argument("--map-at-c10", action="store_true", help="also rewrite at:: and c10:: to troupe::")
    ap.add_argument("--top", type=int, default=25, help="error groups listed")
    ap.add_argument("--markdown", help="write the tables here too")
    ap.add_argument("--json", help="write per-case results here")
    args = ap.parse_args()

    sample = os.path.abspath(args.sample_dir)
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(sample, "*.cpp")))
    if args.files:
        want = [f.strip() for f in args.files.split(",") if f.strip()]
        names = [n for n in names if n in want or os.path.splitext(n)[0] in want]
    skip = {f.strip() for f in args.exclude.split(",") if f.strip()}
    names = [n for n in names if n not in skip]
    if not names:
        sys.exit("no .cpp files to measure in %s" % sample)

    tc = Toolchain(args.build, args.jobs)
    if not args.no_build_libs:
        tc.build_libraries()
    tc.libs, tc.link_flags = tc._link_line()  # the libraries as built now

    work = os.path.abspath(args.work)
    if os.path.isdir(work):
        shutil.rmtree(work)
    for d in ("src", "obj", "bin", "run", "pch"):
        os.makedirs(os.path.join(work, d))
    for h in ("prelude.h", "support.h"):
        shutil.copy(os.path.join(SUPPORT_DIR, h), os.path.join(work, "pch", h))
    pch = os.path.join(work, "pch", "prelude.h")
    rc, out, secs = tc.run([tc.cxx] + tc.cflags + ["-I", os.path.join(work, "pch"), "-x", "c++-header", pch, "-o", pch + ".gch"])
    log("prelude (troupe.h, gtest, support.h) precompiled in %.0fs" % secs)
    if rc != 0:
        sys.exit("the prelude does not compile (troupe.h or scripts/libtorch_sample/support.h):\n" + out[-3000:])

    headers = {}
    for h in sorted(glob.glob(os.path.join(sample, "*.h"))):
        base = os.path.basename(h)
        if base == "support.h":
            continue
        text = rewrite(open(h, errors="replace").read(), set(), args.map_at_c10)
        headers[base] = (text, mask_source(text))

    files = []
    t_all = time.time()
    for n in names:
        log("%s:" % n)
        f = SampleFile(os.path.join(sample, n), work, tc, headers, args)
        files.append(f)
        cut, header_cuts, clean = f.compile_cases()
        if not clean:
            for c in f.cases:
                if c.compile_error is None:
                    c.compile_error = "file-level: the file did not compile clean"
            continue
        if args.no_run:
            continue
        exe = f.build_binary(cut, header_cuts)
        if exe:
            f.run_binary(exe)
        r = summarise([f])[0]
        log("  %s: %d cases, %d compile, %d pass" % (n, r["cases"], r["compile"], r["passed"]))

    head = subprocess.run(["git", "-C", REPO_ROOT, "log", "-1", "--format=%h %s"], capture_output=True, text=True).stdout.strip()
    meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), commit=head, sample=sample,
                map_at_c10=args.map_at_c10, seconds=round(time.time() - t_all))
    md, tot = markdown(files, meta, args.top)
    header = "Measured %s on troupe %s; sample %s%s; %ds.\n\n" % (
        meta["date"], meta["commit"], sample, " (at::/c10:: mapped too)" if args.map_at_c10 else "", meta["seconds"])
    print(header + md)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(header + md + "\n")
    if args.json:
        data = dict(meta=meta, totals=tot, files=[])
        for f in files:
            data["files"].append(dict(file=f.name, area=f.area, file_errors=f.file_errors, notes=f.notes, cases=[
                dict(case=c.full, lines=[c.start_line, c.end_line], cuda=c.cuda, compile_error=c.compile_error,
                     compile_error_raw=c.compile_error_raw, result=c.result, failure=c.failure) for c in f.cases]))
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=1)


if __name__ == "__main__":
    main()
