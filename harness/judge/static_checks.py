"""Static checks of a candidate's source, run in the judge so a cheat is caught before any of it runs. Rules
that depend on the kernel language are keyed by backend (BACKENDS); the backend is detected from the source."""

import ast
import re
from dataclasses import dataclass
from pathlib import Path

PROTECTED_ROOTS = {"torch", "time", "harness", "builtins", "numpy", "gc", "problems"}
THREAD_MODULES = {"threading": "threads", "_thread": "threads", "concurrent": "threads", "ctypes": "ctypes",
                  "multiprocessing": "processes", "subprocess": "processes", "cffi": "ctypes"}
OS_PROCESS_CALLS = re.compile(r"^os\.(fork|forkpty|system|popen|spawn\w*|exec\w*|posix_spawn\w*)$")
STREAM_CALLS = {"torch.cuda.Stream", "torch.cuda.streams.Stream", "torch.cuda.ExternalStream", "torch.Stream",
                "torch.cuda.stream", "torch.cuda.StreamContext"}
SUBCLASS_BASES = {"torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"}
EXT_LOADERS = {"torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"}
BACKENDS = {  # backend: the decorators that make a Python function its kernel (cuda: __global__ in a native source)
    "cuda": frozenset(),
    "triton": frozenset({"triton.jit", "triton.autotune", "triton.heuristics", "triton.runtime.jit.jit"}),
    "cute": frozenset({"cutlass.cute.kernel", "cutlass.cute.jit"}),
    "tilelang": frozenset({"tilelang.jit", "tilelang.language.prim_func", "tvm.script.tir.prim_func"}),
}
NON_COMPUTE = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
               "full_like", "tensor", "as_tensor", "device", "Size", "no_grad", "is_tensor",
               "is_floating_point", "get_default_dtype", "cuda.current_stream", "cuda.current_device",
               "cuda.synchronize", "cuda.is_available", "Generator", "manual_seed"}
CUDA_STREAM_RE = re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool|cuStreamCreate\w*)\b")
CUDA_THREAD_RE = re.compile(r"\b(std::thread|pthread_create|std::async|std::jthread)\b")
C_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
LAUNCH_BOUNDS_RE = re.compile(r"__launch_bounds__\s*\([^)]*\)")
GLOBAL_NAME_RE = re.compile(r"__global__\s[^(;{]*?(\w+)\s*\(")

WARNINGS = {"torch_compute_in_forward"}


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    detail: str

    @property
    def severity(self) -> str:
        return "warning" if self.rule in WARNINGS else "error"


class _Analyzer(ast.NodeVisitor):
    def __init__(self, source: str, base_dir: Path | None, problem_names: set[str]):
        self.base_dir = base_dir
        self.alias: dict[str, str] = {}
        self.protected = PROTECTED_ROOTS | problem_names
        self.findings: list[Finding] = []
        self.ext_names: set[str] = set()
        self.kernels: set[str] = set()
        self.backends: set[str] = set()
        self.tree = ast.parse(source)
        self.doc_ids = {id(n.body[0].value) for n in ast.walk(self.tree)  # docstrings are prose, never code
                        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                        and ast.get_docstring(n, clean=False) is not None}

    def add(self, rule: str, node: ast.AST, detail: str) -> None:
        self.findings.append(Finding(rule, getattr(node, "lineno", 0), detail))

    def dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.alias.get(node.id, node.id)
        base = self.dotted(node.value) if isinstance(node, ast.Attribute) else None
        return f"{base}.{node.attr}" if base else None

    def is_protected(self, node: ast.AST) -> str | None:
        path = self.dotted(node)
        return path if path and path.split(".")[0] in self.protected else None

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            name = a.asname or a.name.split(".")[0]
            self.alias[name] = a.name if a.asname else name
            self._module_rule(a.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        self._module_rule(mod, node)
        for a in node.names:
            self.alias[a.asname or a.name] = f"{mod}.{a.name}" if mod else a.name
            if mod == "os" and OS_PROCESS_CALLS.match(f"os.{a.name}"):
                self.add("processes", node, f"imports os.{a.name}")

    def _module_rule(self, name: str, node: ast.AST) -> None:
        if rule := THREAD_MODULES.get(name.split(".")[0]):
            self.add(rule, node, f"imports {name}")

    def _check_target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t, node)
        elif isinstance(target, ast.Attribute) and (path := self.is_protected(target)):
            self.add("patches_runtime", node, f"assigns {path}")
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
            if target.value.attr == "__dict__" and (path := self.is_protected(target.value)):
                self.add("patches_runtime", node, f"writes {path}")

    def visit_Assign(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) -> None:
        """Targets are checked before a plain assignment's aliases, which take effect only after it."""
        for t in node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]:
            self._check_target(t, node)
        if isinstance(node, ast.Assign):
            path = self.is_protected(node.value)
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for name in names if path else []:
                self.alias[name] = path
            made = node.value.func if isinstance(node.value, ast.Call) else None  # an extension, a DSL kernel
            if made is not None and (self.dotted(made) in EXT_LOADERS or getattr(made, "id", None) in self.ext_names):
                self.ext_names.update(names, [f"self.{t.attr}" for t in node.targets if isinstance(t, ast.Attribute)])
        self.generic_visit(node)

    visit_AugAssign = visit_AnnAssign = visit_Delete = visit_Assign

    def visit_Call(self, node: ast.Call) -> None:
        path = self.dotted(node.func) or ""
        first = node.args[0] if node.args else None
        if path.removeprefix("builtins.") in ("setattr", "delattr") and (target := self.is_protected(first)):
            self.add("patches_runtime", node, f"{path}({target}, ...)")
        if OS_PROCESS_CALLS.match(path):
            self.add("processes", node, f"calls {path}")
        if path in STREAM_CALLS:
            self.add("side_stream", node, f"calls {path}")
        if path.endswith("_make_subclass"):
            self.add("tensor_subclass", node, "calls _make_subclass")
        if path in ("__import__", "importlib.import_module") and isinstance(first, ast.Constant):
            self._module_rule(str(first.value), node)
        if path == "torch.utils.cpp_extension.load":
            self._scan_load_files(node)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef | ast.FunctionDef) -> None:
        for d in node.decorator_list:
            path = self.dotted(d.func if isinstance(d, ast.Call) else d) or ""
            for backend, decorators in BACKENDS.items():
                if path in decorators:  # a kernel, or a factory of one: calls of it launch candidate code
                    self.backends.add(backend)
                    self.ext_names.add(node.name)
                    self.kernels.add(node.name)
        if isinstance(node, ast.FunctionDef) and node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add("tensor_subclass", node, f"defines {node.name}")
        for b in node.bases if isinstance(node, ast.ClassDef) else []:
            if self.dotted(b) in SUBCLASS_BASES:
                self.add("tensor_subclass", node, f"class {node.name} subclasses {self.dotted(b)}")
        self.generic_visit(node)

    visit_FunctionDef = visit_ClassDef

    def visit_Try(self, node: ast.Try) -> None:
        for h in node.handlers:
            for sub in ast.walk(ast.Module(body=h.body, type_ignores=[])):
                path = (self.dotted(sub.func) or "") if isinstance(sub, ast.Call) else ""
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
            self.backends.add("cuda")
            self.kernels.update(GLOBAL_NAME_RE.findall(LAUNCH_BOUNDS_RE.sub(" ", code)))
        for rx, rule in ((CUDA_STREAM_RE, "side_stream"), (CUDA_THREAD_RE, "threads")):
            for m in rx.finditer(code):
                self.findings.append(Finding(rule, line + code.count("\n", 0, m.start()),
                                             f"native source uses {m.group(1)}"))

    def _scan_load_files(self, node: ast.Call) -> None:
        for s in [kw.value for kw in node.keywords if kw.arg == "sources"] or node.args[1:2]:
            for it in s.elts if isinstance(s, (ast.List, ast.Tuple)) else [s]:
                if isinstance(it, ast.Constant) and isinstance(it.value, str) and self.base_dir is not None:
                    p = self.base_dir / it.value
                    if p.is_file():
                        self._scan_native(p.read_text(errors="replace"), node.lineno)

    def forward_findings(self) -> None:
        defs = [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        funcs = {fn.name: fn for fn in reversed(defs)}  # the first definition of a name wins
        forwards = [f for c in ast.walk(self.tree) if isinstance(c, ast.ClassDef) and c.name == "ModelNew"
                    for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "forward"]
        if not forwards:
            return
        forward = forwards[-1]

        def callee(f: ast.AST) -> str | None:
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                return f.attr
            return f.id if isinstance(f, ast.Name) else None
        def uses_ext(c: ast.Call) -> bool:
            node = c.func.value if isinstance(c.func, ast.Subscript) else c.func  # a Triton launch: kernel[grid](...)
            while isinstance(node, ast.Attribute):
                if callee(node) and f"self.{node.attr}" in self.ext_names:
                    return True
                node = node.value
            return isinstance(node, ast.Name) and node.id in self.ext_names
        def reaches_ext(fn: ast.AST) -> bool:
            return any(uses_ext(c) or callee(c.func) in calling_ext for c in ast.walk(fn) if isinstance(c, ast.Call))

        calling_ext: set[str] = set()
        while (grown := {name for name, fn in funcs.items() if reaches_ext(fn)}) != calling_ext:
            calling_ext = grown
        if reaches_ext(forward):
            return
        for c in ast.walk(forward):
            path = (self.dotted(c.func) or "") if isinstance(c, ast.Call) else ""
            if path.startswith("torch.") and path[len("torch."):] not in NON_COMPUTE:
                self.add("torch_compute_in_forward", c, f"forward calls {path} and no custom kernel")
                return


def analyze(source: str, device: str, base_dir: Path | None = None,
            problem_names: set[str] | None = None) -> list[Finding]:
    """Findings for one candidate source; a file that does not parse gets none (its import will fail)."""
    try:
        a = _Analyzer(source, base_dir, problem_names or set())
    except SyntaxError:
        return []
    a.visit(a.tree)
    if device == "cuda":
        if not a.backends:
            a.findings.append(Finding("no_custom_kernel", 1, "no kernel: no __global__ function in a native source "
                                      f"and no function decorated by {', '.join(sorted(set().union(*BACKENDS.values())))}"))
        a.forward_findings()
    unique = {(f.line, f.rule): f for f in reversed(a.findings)}  # the first finding of a rule on a line wins
    return sorted(unique.values(), key=lambda f: (f.line, f.rule))


def defined_kernels(source: str, base_dir: Path | None = None) -> frozenset[str]:
    """Names of the kernels a candidate defines: __global__ functions in its native sources and functions a
    kernel DSL's decorator makes kernels. What the GPU profiler names a launch of one contains its name."""
    try:
        a = _Analyzer(source, base_dir, set())
    except SyntaxError:
        return frozenset()
    a.visit(a.tree)
    return frozenset(a.kernels)


def launched_own_kernel(defined: frozenset[str], launched: list[str]) -> bool:
    """Whether any launched kernel's name holds a defined kernel's name as a whole identifier (a C++ name
    demangled with its namespace, template arguments and parameters; a Triton kernel by its function's name)."""
    return any(defined & set(re.findall(r"\w+", name)) for name in launched)
