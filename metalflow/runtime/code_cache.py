"""Compile each workflow module once per worker process, not once per workflow run.

Why: Temporal's workflow sandbox gives every workflow run its own fresh copy of the modules it
imports that are not passed through (`workflows/*`: ~270 KB of source), so each new run, and
each replay after the sticky cache evicts a run, executes those modules again. Python normally
takes their code from the `__pycache__` files; where there are none (an editable install run
with `PYTHONDONTWRITEBYTECODE=1`, a read-only checkout) it compiles every module from source
again, each time. Measured on the 200-host fleet benchmark: 53% of the worker's samples (py-spy,
60 s) were in `source_to_code`, about 0.18 s of CPU per workflow run started, and the fleet
ran slower than its own request rate. Bytecode files are a cache the environment may forbid;
this one lives in memory.

How: `install()` puts a finder in front of `sys.meta_path` that asks the others for the spec
and, for a plain source file, gives it a loader that keeps one code object per source file,
reused while the file's bytes are the same (a changed file compiles again). Code objects are
immutable: executing one again into a new module is what a `.pyc` gives too. Nothing else about
importing changes (which module is found, passthrough, the sandbox's restrictions).

Cost: memory of one code object plus the source bytes per module file imported (a few MB for
the whole product); a dict lookup and a byte comparison per sandboxed import. No files written.

The sandbox's own snippets (`SnippetCachingRunner`): the SDK's sandbox enters a run through
`exec` of a short source string, compiled again on every call: at a run's creation, at every
activation, and twice per command it sends (the serialization and external-store contexts).
py-spy on the 100-host fleet benchmark put 2.9% of the worker's busy samples in that compile
(~21 us each on an idle core). `SnippetCachingRunner` hands the sandbox the compiled code
object instead (`exec` takes either); what runs, and how it is isolated, is unchanged. Cost: a
dict of a few code objects per process (one per snippet text: the two creation snippets name
the workflow class, so about three per workflow type plus three), a dict lookup per call.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Sequence
from types import CodeType, ModuleType
from typing import Any, ClassVar

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner


class CachingSourceLoader(importlib.machinery.SourceFileLoader):
    """A source loader that compiles a file's bytes once per process."""

    _codes: ClassVar[dict[str, tuple[bytes, CodeType]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()  # sandboxes import on worker threads
    compiled: ClassVar[int] = 0  # how many compilations happened (tests read it)

    def source_to_code(self, data: Any, path: Any, *, _optimize: int = -1) -> CodeType:  # type: ignore[override]
        source = bytes(data)
        key = str(path)
        with self._lock:
            known = self._codes.get(key)
        if known is not None and known[0] == source:
            return known[1]
        code: CodeType = super().source_to_code(source, path)
        with self._lock:
            self._codes[key] = (source, code)
            CachingSourceLoader.compiled += 1
        return code


class CodeCacheFinder(importlib.abc.MetaPathFinder):
    """Finds as the finders after it do; hands plain source files to `CachingSourceLoader`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in list(sys.meta_path):
            if finder is self or isinstance(finder, CodeCacheFinder):
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None
            )
            if spec is None:
                continue
            # Only the standard source loader: any other (extensions, zip, namespace) is kept.
            if type(spec.loader) is importlib.machinery.SourceFileLoader and spec.origin:
                spec.loader = CachingSourceLoader(spec.name, spec.origin)
            return spec
        return None


def install() -> None:
    """Put the code cache in front of the import system (once per process; idempotent), and
    keep tracebacks from parsing source on the worker's threads (`no_caret_parsing`)."""
    if not any(isinstance(finder, CodeCacheFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, CodeCacheFinder())
    no_caret_parsing()


def no_caret_parsing() -> None:
    """CPython 3.11's `traceback` parses each frame's failing line (`ast.parse`) to place its `^~~`
    carets, and 3.11 keeps the AST conversion's recursion depth per interpreter, not per thread:
    two threads formatting tracebacks at once (failed activities and workflow tasks on the
    worker's threads) can corrupt it, and every later `compile` of the process (the sandbox's
    imports, pytest) then fails with `SystemError: AST constructor recursion depth mismatch`
    (seen in `make test`: a worker's tests failed one after another). Tracebacks keep every line
    but the carets. Idempotent; nothing on Python >= 3.12, whose traceback does not need it."""
    import traceback

    if sys.version_info < (3, 12) and hasattr(traceback, "_extract_caret_anchors_from_line_segment"):
        traceback._extract_caret_anchors_from_line_segment = lambda segment: None


_snippets: dict[str, CodeType] = {}  # snippet text -> code; a race compiles twice, harmlessly


def compiled_snippet(source: str) -> CodeType:
    """The code object of one of the sandbox's entry snippets, compiled once per process."""
    code = _snippets.get(source)
    if code is None:
        code = _snippets[source] = compile(source, "<string>", "exec")
    return code


@functools.cache
def _snippet_caching_instance() -> type[WorkflowInstance]:
    """The SDK's sandboxed instance with `_run_code` taking compiled snippets.

    Raises:
        ImportError: This SDK has no `workflow_sandbox._runner._Instance` with `_run_code`.
    """
    from temporalio.worker.workflow_sandbox._runner import _Instance  # private: see the runner

    if not callable(getattr(_Instance, "_run_code", None)):
        raise ImportError("temporalio's sandbox _Instance has no _run_code")

    class SnippetCachingInstance(_Instance):
        def _run_code(self, code: Any, **extra_globals: Any) -> None:
            # The SDK passes source text to `exec`; a code object of the same text runs the same
            # (the SDK annotates `str`, its only use of the argument is `exec`, which takes either).
            snippet = compiled_snippet(code) if isinstance(code, str) else code
            super()._run_code(snippet, **extra_globals)  # type: ignore[arg-type]

    return SnippetCachingInstance


class SnippetCachingRunner(SandboxedWorkflowRunner):
    """The SDK's sandboxed runner (same restrictions, same isolation per run) whose entry
    snippets are compiled once per process rather than on every call (see the module docstring).

    It reaches one private name of the SDK (`workflow_sandbox._runner._Instance`, whose
    `_run_code` it overrides): pinned by `tests/test_code_cache.py`, which fails if an SDK
    upgrade moves it.
    """

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _snippet_caching_instance()(det, self.runner_class, self.restrictions)  # type: ignore[call-arg]


def workflow_runner() -> SandboxedWorkflowRunner:
    """The worker's sandboxed runner: `SnippetCachingRunner`, or the SDK's own when this SDK has
    not the private name it overrides (an upgrade moved it): same behaviour, snippets compiled
    per call as before (about 3% of a busy worker's samples)."""
    try:
        _snippet_caching_instance()
    except ImportError:  # pragma: no cover - pinned by tests/test_code_cache.py
        logging.getLogger("metalflow.worker").debug("sandbox snippets compiled per call (no _Instance)")
        return SandboxedWorkflowRunner()
    return SnippetCachingRunner()
