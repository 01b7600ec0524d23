"""Static checks of a candidate's source, in the judge, before anything of it runs.

AST-based: Python comments and docstrings never trigger a rule, and CUDA/C++ sources are scanned with
their comments removed. Each finding names its rule and line. Under the `strict` policy an `error`
finding rejects the candidate unbuilt; `warn` only flags; `off` skips the checks.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

PROTECTED_ROOTS = {"torch", "time", "harness", "builtins", "numpy", "gc", "problems"}
THREAD_MODULES = {"threading": "threads", "_thread": "threads", "concurrent": "threads",
                  "multiprocessing": "processes", "subprocess": "processes", "ctypes": "ctypes",
                  "cffi": "ctypes"}
OS_PROCESS_CALLS = re.compile(r"^os\.(fork|forkpty|system|popen|spawn\w*|exec\w*|posix_spawn\w*)$")
STREAM_CALLS = {"torch.cuda.Stream", "torch.cuda.streams.Stream", "torch.cuda.ExternalStream", "torch.Stream",
                "torch.cuda.stream", "torch.cuda.StreamContext"}
SUBCLASS_BASES = {"torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"}
EXT_LOADERS = {"torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"}
NON_COMPUTE = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
               "full_like", "tensor", "as_tensor", "device", "Size", "no_grad", "is_tensor", "is_floating_point",
               "get_default_dtype", "cuda.current_stream", "cuda.current_device", "cuda.synchronize",
               "cuda.is_available", "Generator", "manual_seed"}
CUDA_STREAM_RE = re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool|cuStreamCreate\w*)\b")
CUDA_THREAD_RE = re.compile(r"\b(std::thread|pthread_create|std::async|std::jthread)\b")
C_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)

RULES = {
    "no_custom_kernel": "a CUDA candidate must define a kernel (__global__) in its load_inline/load sources",
    "patches_runtime": "assigns to an attribute of torch, time, builtins, the harness or the problem module",
    "threads": "uses threads (threading, concurrent.futures, std::thread): work could run outside the timed call",
    "processes": "starts processes (multiprocessing, subprocess, os.fork)",
    "ctypes": "loads native code through ctypes/cffi, which can patch anything",
    "side_stream": "creates a CUDA stream: work on it is invisible to events on the current stream",
    "tensor_subclass": "defines a Tensor subclass or torch function hook (lazy or proxy outputs)",
    "torch_fallback": "falls back to torch operators in an except handler",
    "torch_compute_in_forward": "ModelNew.forward computes with torch operators and calls no custom kernel",
}
WARNINGS = {"torch_compute_in_forward"}


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    detail: str

    @property
    def severity(self) -> str:
        return "warning" if self.rule in WARNINGS else "error"

    def __str__(self) -> str:
        return f"{self.rule} (line {self.line}: {self.detail})"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


class _Analyzer(ast.NodeVisitor):
    def __init__(self, source: str, device: str, base_dir: Path | None, problem_names: set[str]):
        self.device = device
        self.base_dir = base_dir
        self.alias: dict[str, str] = {}
        self.protected = PROTECTED_ROOTS | problem_names
        self.findings: list[Finding] = []
        self.ext_names: set[str] = set()
        self.has_kernel = False
        self.tree = ast.parse(source)
        self.doc_ids = _docstrings(self.tree)

    def add(self, rule: str, node: ast.AST, detail: str, line: int | None = None) -> None:
        self.findings.append(Finding(rule, line or getattr(node, "lineno", 0), detail))

    def dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.alias.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def is_protected(self, node: ast.AST) -> str | None:
        path = self.dotted(node)
        if path and path.split(".")[0] in self.protected:
            return path
        return None

    # imports and aliases
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.alias[(a.asname or a.name).split(".")[0] if not a.asname else a.asname] = (
                a.name if a.asname else a.name.split(".")[0])
            self._module_rule(a.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        self._module_rule(mod, node)
        for a in node.names:
            self.alias[a.asname or a.name] = f"{mod}.{a.name}" if mod else a.name
            if mod == "os" and OS_PROCESS_CALLS.match(f"os.{a.name}"):
                self.add("processes", node, f"imports os.{a.name}")

    def _module_rule(self, name: str, node: ast.AST) -> None:
        root = name.split(".")[0]
        if root in THREAD_MODULES:
            self.add(THREAD_MODULES[root], node, f"imports {name}")

    # patches
    def _check_target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t, node)
        elif isinstance(target, ast.Attribute):
            path = self.is_protected(target)
            if path:
                self.add("patches_runtime", node, f"assigns {path}")
        elif isinstance(target, ast.Subscript):
            inner = target.value
            if isinstance(inner, ast.Attribute) and inner.attr == "__dict__" and self.is_protected(inner.value):
                self.add("patches_runtime", node, f"writes {self.dotted(inner.value)}.__dict__")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t, node)
        path = self.dotted(node.value)
        loads_ext = isinstance(node.value, ast.Call) and self.dotted(node.value.func) in EXT_LOADERS
        for t in node.targets:
            if isinstance(t, ast.Name):
                if path and path.split(".")[0] in self.protected:
                    self.alias[t.id] = path
                if loads_ext:
                    self.ext_names.add(t.id)
            elif loads_ext and isinstance(t, ast.Attribute):
                self.ext_names.add(f"self.{t.attr}")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_target(t, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        path = self.dotted(node.func) or ""
        if path in ("setattr", "delattr", "builtins.setattr", "builtins.delattr") and node.args:
            target = self.is_protected(node.args[0])
            if target:
                self.add("patches_runtime", node, f"{path}({target}, ...)")
        if OS_PROCESS_CALLS.match(path):
            self.add("processes", node, f"calls {path}")
        if path in STREAM_CALLS:
            self.add("side_stream", node, f"calls {path}")
        if path.endswith("_make_subclass"):
            self.add("tensor_subclass", node, "calls _make_subclass")
        if path in ("__import__", "importlib.import_module") and node.args and isinstance(node.args[0], ast.Constant):
            self._module_rule(str(node.args[0].value), node)
        if path == "torch.utils.cpp_extension.load":
            self._scan_load_files(node)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for b in node.bases:
            if self.dotted(b) in SUBCLASS_BASES:
                self.add("tensor_subclass", node, f"class {node.name} subclasses {self.dotted(b)}")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add("tensor_subclass", node, f"defines {node.name}")
        self.generic_visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        for h in node.handlers:
            for sub in ast.walk(ast.Module(body=h.body, type_ignores=[])):
                if isinstance(sub, ast.Call):
                    path = self.dotted(sub.func) or ""
                    if path.startswith("torch.") and not path.startswith("torch.cuda.synchronize"):
                        self.add("torch_fallback", sub, f"calls {path} in an except handler")
                        break
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.doc_ids:
            self._scan_native(node.value, node.lineno)

    def _scan_native(self, text: str, line: int) -> None:
        code = C_COMMENT_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        if "__global__" in code:
            self.has_kernel = True
        for rx, rule in ((CUDA_STREAM_RE, "side_stream"), (CUDA_THREAD_RE, "threads")):
            for m in rx.finditer(code):
                self.findings.append(Finding(rule, line + code.count("\n", 0, m.start()),
                                             f"native source uses {m.group(1)}"))

    def _scan_load_files(self, node: ast.Call) -> None:
        srcs = [kw.value for kw in node.keywords if kw.arg == "sources"] or node.args[1:2]
        for s in srcs:
            items = s.elts if isinstance(s, (ast.List, ast.Tuple)) else [s]
            for it in items:
                if isinstance(it, ast.Constant) and isinstance(it.value, str) and self.base_dir is not None:
                    p = self.base_dir / it.value
                    if p.is_file():
                        self._scan_native(p.read_text(errors="replace"), node.lineno)

    # forward analysis
    def forward_findings(self) -> None:
        funcs: dict[str, ast.AST] = {}
        forward = None
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.setdefault(node.name, node)
            if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "forward":
                        forward = item
        if forward is None:
            return

        def calls(fn: ast.AST) -> list[ast.Call]:
            return [n for n in ast.walk(fn) if isinstance(n, ast.Call)]

        def callee_name(c: ast.Call) -> str | None:
            f = c.func
            if isinstance(f, ast.Name):
                return f.id
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                return f.attr
            return None

        def uses_ext(c: ast.Call) -> bool:
            node = c.func
            while isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name) and node.value.id == "self" and f"self.{node.attr}" in self.ext_names:
                    return True
                node = node.value
            return isinstance(node, ast.Name) and node.id in self.ext_names

        calling_ext = {name for name, fn in funcs.items() if any(uses_ext(c) for c in calls(fn))}
        changed = True
        while changed:
            changed = False
            for name, fn in funcs.items():
                if name not in calling_ext and any(callee_name(c) in calling_ext for c in calls(fn)):
                    calling_ext.add(name)
                    changed = True
        fcalls = calls(forward)
        if any(uses_ext(c) or callee_name(c) in calling_ext for c in fcalls):
            return
        for c in fcalls:
            path = self.dotted(c.func) or ""
            if path.startswith("torch.") and path[len("torch."):] not in NON_COMPUTE:
                self.add("torch_compute_in_forward", c, f"forward calls {path} and no custom kernel")
                return


def analyze(source: str, device: str, base_dir: Path | None = None, problem_names: set[str] | None = None) -> list[Finding]:
    """Findings for one candidate source; a file that does not parse gets none (its import will fail)."""
    try:
        a = _Analyzer(source, device, base_dir, problem_names or set())
    except SyntaxError:
        return []
    a.visit(a.tree)
    if device == "cuda":
        if not a.has_kernel:
            a.findings.append(Finding("no_custom_kernel", 1, "no __global__ function in any native source"))
        a.forward_findings()
    seen = set()
    unique = []
    for f in sorted(a.findings, key=lambda f: (f.line, f.rule)):
        if (f.rule, f.line) not in seen:
            seen.add((f.rule, f.line))
            unique.append(f)
    return unique
