#!/usr/bin/env python3
"""Finds file-local functions whose name a unity build would let other files meet.

A unity build (PEJIT_UNITY_BUILD, the top-level CMakeLists.txt) compiles several of a library's
files as one translation unit, and the unnamed namespaces of its files become one. Two files'
file-local classes or variables of one name then fail to compile, which is loud. A file-local
function is quieter: code in another file's unnamed namespace that calls a function of that
name finds the file-local one first, before a `using pe::mix;` or any function of an enclosing
namespace, and calls it without an error when the arguments fit (this happened: merge_instances'
own `mix` took the place of pe::mix in partial_eval's skeleton hash). So this script lists every
file-local function (a namespace's, not a class member) whose short name another file of its
batch defines or calls, so that it is renamed or its file kept out of the batches. Not covered:
file-local types and constants (no symbol says where they are used).

  scripts/unity_names.py UNITY_BUILD PLAIN_BUILD

UNITY_BUILD is a build folder configured with PEJIT_UNITY_BUILD=ON (only its generated
Unity/unity_*_cxx.cxx files are read: which files share a batch). PLAIN_BUILD is a build folder
of the same sources with PEJIT_UNITY_BUILD=OFF whose four libraries are built without inlining,
so that every file-local function has a symbol of its own:

  cmake -S . -B build-names -G Ninja -DCMAKE_BUILD_TYPE=None \\
        -DCMAKE_CXX_FLAGS="-O0 -fno-inline" -DPEJIT_UNITY_BUILD=OFF
  ninja -C build-names pejit_core pejit_specializer pejit_jit pejit_runtime

Exit status 0 when no batch of the libraries holds such a name, 1 when one does (each printed
with the files that meet it). The test executables' batches are not read: each test file's code
is in a namespace of its own (tests/CMakeLists.txt), checked by scripts/unity_check.sh.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Template code of these libraries is instantiated over file-local types (a std::vector of a
# file's own struct) and then has internal linkage too; it is not the files' own naming.
FOREIGN = ("std::", "__gnu_cxx::", "fmt::", "nlohmann::", "tbb::", "boost::", "llvm::", "__cxx")
# Symbols the compiler makes (static initialisers, clones, lambdas' bodies); names that begin with
# two underscores belong to the C and C++ libraries' headers (__gthread_active_p).
GENERATED = re.compile(r"_GLOBAL__|__static_initialization|__tcf_|\{lambda"
                       r"|\.(cold|isra|constprop|part|localalias)")


def batches(unity_build):
    """Lists of absolute source paths, one list per generated unity file."""
    out = []
    for root, _, files in os.walk(unity_build):
        for f in sorted(files):
            if re.fullmatch(r"unity_\d+_cxx\.cxx", f):
                text = open(os.path.join(root, f)).read()
                out.append(re.findall(r'#include "([^"]+)"', text))
    return out


def objects(plain_build):
    """Source path -> object path, from the plain build's compile_commands.json."""
    out = {}
    for entry in json.load(open(os.path.join(plain_build, "compile_commands.json"))):
        args = shlex.split(entry["command"])
        if "-o" in args:
            out[entry["file"]] = os.path.join(entry["directory"], args[args.index("-o") + 1])
    return out


def strip_templates(text):
    """'a<b<c>>::f<d>' -> 'a::f' (an operator's own '<' is kept)."""
    out, depth = [], 0
    for i, c in enumerate(text):
        if c == "<" and not text[:i].endswith("operator") and not text[:i].endswith("operator<"):
            depth += 1
        elif c == ">" and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def split_name(demangled):
    """('ns::f', '(int)') for 'ns::f(int) const' or 'void ns::f<int>(int)' (a template's return
    type comes first in its demangled name); (None, None) for what is not a function of a
    namespace (a function's local class, a lambda)."""
    text = demangled.replace("(anonymous namespace)", "{anon}").replace("[abi:cxx11]", "")
    if "decltype" in text:
        return None, None
    depth = 0
    for i, c in enumerate(text):
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(depth - 1, 0)
        elif c == "(" and depth == 0:
            words = strip_templates(text[:i]).split(" ")
            name = words[-1]
            if len(words) > 1 and words[-2].endswith("operator"):
                name = words[-2] + " " + name  # a conversion operator: 'ns::C::operator bool'
            rest, parens = text[i:], 0
            for j, d in enumerate(rest):
                parens += {"(": 1, ")": -1}.get(d, 0)
                if parens == 0:
                    if rest[j + 1:].lstrip().startswith("::"):
                        return None, None  # inside a function: a local class's member
                    break
            return name.replace("{anon}", "(anonymous namespace)"), rest
    return None, None


def free_function(name):
    """Whether a qualified name is a namespace's function, not a class's member: the project's
    namespaces are lower case and its classes capitalised (STYLE)."""
    scopes = name.split("::")[:-1]
    return all(p == "(anonymous namespace)" or re.fullmatch(r"[a-z_][a-z0-9_]*", p) for p in scopes)


def symbols(obj):
    """(file-local, every) free functions of an object: short name -> set of qualified names
    with signatures. File-local: defined with internal linkage ('t'). Every: defined or called."""
    nm = subprocess.run(["nm", "-C", obj], capture_output=True, text=True, check=True).stdout
    local, every = defaultdict(set), defaultdict(set)
    for line in nm.splitlines():
        parts = line.split(None, 2) if not line.startswith(" ") else ["", *line.split(None, 1)]
        if len(parts) != 3 or GENERATED.search(parts[2]):
            continue
        name, sig = split_name(parts[2])
        if not name or name.startswith(FOREIGN) or not free_function(name):
            continue
        short = name.split("::")[-1]
        if short.startswith("__") or short.startswith("operator"):
            continue
        every[short].add(name + sig)
        if parts[1] == "t":
            local[short].add(name + sig)
    return local, every


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    unity_build, plain_build = sys.argv[1], sys.argv[2]
    objs = objects(plain_build)
    found = checked = 0
    groups = batches(unity_build)
    if not groups:
        sys.exit(f"unity_names: no Unity/unity_*_cxx.cxx under {unity_build} "
                 "(configure it with -DPEJIT_UNITY_BUILD=ON)")
    for group in groups:
        if any(os.path.relpath(src, ROOT).startswith("tests" + os.sep) for src in group):
            continue  # the test files' batches: each file's code is in a namespace of its own
        checked += 1
        syms = {}
        for src in group:
            if src not in objs or not os.path.exists(objs[src]):
                sys.exit(f"unity_names: {src} has no object in {plain_build} (build its library)")
            syms[src] = symbols(objs[src])
        for a in group:
            for short, defs in sorted(syms[a][0].items()):
                users = {b: syms[b][1][short] for b in group if b != a and short in syms[b][1]}
                if users:
                    found += 1
                    print(f"{short}: file-local in {a} ({'; '.join(sorted(defs))}), and in the "
                          "same batch:")
                    for b, names in users.items():
                        print(f"  {b}: {'; '.join(sorted(names))}")
    print(f"unity_names: {checked} batches of the libraries, {found} file-local function names met "
          "elsewhere in their batch")
    return 1 if found or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
