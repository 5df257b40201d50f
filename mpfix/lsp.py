"""The Language Server behind ``mpfix server`` (pygls 2 / lsprotocol), over stdin/stdout.

Each open Python document is linted through ``mpfix.api.lint_text`` when it is opened,
changed and saved, with the ``[tool.mpfix]`` settings of its project; findings become
warnings (code, source ``mpfix``, a link to the rule's documentation). Each fix is a
quick fix built from the engine's own text edits (the JSON ``fix.edits``), labelled safe
or unsafe, and ``# noqa: CODE`` for the line is one more (``mpfix.noqa``);
``source.fixAll.mpfix`` applies every safe fix of the file; hovering a finding shows its
rule's explanation. Changes are linted after a short pause in typing. Nothing here imports
TensorFlow.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace.position_codec import Utf16, impls

from mpfix import __version__, api
from mpfix.config import ConfigError
from mpfix.findings import Finding, FixSafety
from mpfix.lsp_stream import is_open
from mpfix.rule_docs import rule_url

SOURCE = "mpfix"
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.mpfix"
_NEWLINE = re.compile(r"\r\n|\r|\n")
DEBOUNCE_S = 0.15  # after a change, wait this long for the next one before linting
MAX_BUFFER_CHARS = 256 * 1024  # larger buffers get one MP000 saying so instead of a lint taking minutes

logger = logging.getLogger(__name__)


class Lines:
    """A text's lines as LSP counts them (``\\n``, ``\\r\\n``, ``\\r``), and positions in the client's units.

    mpfix positions are 1-based lines and 1-based columns in code points; LSP ones are
    0-based, with columns in the negotiated encoding (UTF-16 unless the client offered another).
    """

    def __init__(self, text: str, units=None) -> None:
        self.text = text
        self.units = units or Utf16()
        self.starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def _line_text(self, line: int) -> str:
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def position(self, line: int, column: int) -> types.Position:
        """The LSP position of mpfix's (line, column), both 1-based."""
        index = min(max(line - 1, 0), len(self.starts) - 1)
        prefix = self._line_text(index)[: max(column - 1, 0)]
        return types.Position(line=index, character=self.units.num_units(prefix))

    def at_offset(self, offset: int) -> types.Position:
        """The LSP position of a code-point offset into the text."""
        import bisect

        index = bisect.bisect_right(self.starts, offset) - 1
        return types.Position(line=index, character=self.units.num_units(self.text[self.starts[index]:offset]))

    def offset(self, position: types.Position) -> int:
        """The code-point offset of an LSP position (clamped to the text)."""
        if position.line >= len(self.starts):
            return len(self.text)
        line = self._line_text(position.line)
        count = 0
        for index, char in enumerate(line):
            if count >= position.character:
                return self.starts[position.line] + index
            count += self.units.code_units_for_char(char)
        return self.starts[position.line] + len(line)


def text_edits(text: str, edits, lines: Lines) -> list[types.TextEdit]:
    """mpfix ``Edit`` objects (positions as ``text_edits`` writes them) as LSP text edits. Both count
    lines as Python and LSP do (``mpfix.source.lines``), so ``lines.starts`` are the edits' lines."""
    starts = lines.starts

    def offset(position) -> int:
        index = min(position.line - 1, len(starts) - 1)
        return starts[index] + position.column - 1

    return [types.TextEdit(range=types.Range(lines.at_offset(offset(e.start)), lines.at_offset(offset(e.end))),
                           new_text=e.content) for e in edits]


@dataclass
class Linted:
    """One document's last lint: the text it was run on and what it found."""

    text: str
    lines: Lines
    findings: list[Finding]
    diagnostics: list[types.Diagnostic]
    fix_all: list[types.TextEdit] | None = None  # every safe fix of the text, computed when first asked for


def _path_of(uri: str) -> Path:
    path = to_fs_path(uri) if uri.startswith("file:") else None
    return Path(path) if path else Path.cwd() / "untitled.py"


def _is_python(document) -> bool:
    language = getattr(document, "language_id", None)
    return language == "python" or document.uri.endswith((".py", ".pyi"))


def _diagnostic_for(finding: Finding, lines: Lines) -> types.Diagnostic:
    fix = finding.fix_safety
    return types.Diagnostic(
        range=types.Range(lines.position(finding.start.line, finding.start.column),
                          lines.position(finding.end.line, finding.end.column)),
        message=finding.message,
        severity=types.DiagnosticSeverity.Warning,
        code=finding.code,
        code_description=types.CodeDescription(href=rule_url(finding.code)),
        source=SOURCE,
        data={"fix": str(fix)},
    )


def _error_diagnostic(message: str, lines: Lines, line: int = 1, column: int = 1) -> types.Diagnostic:
    start = lines.position(line, column)
    end = lines.position(line, 10**6)  # to the end of the line
    if end.character <= start.character:
        end = types.Position(line=start.line, character=start.character + 1)
    return types.Diagnostic(range=types.Range(start, end), message=message,
                            severity=types.DiagnosticSeverity.Error, code="MP000", source=SOURCE)


class MpfixServer(LanguageServer):
    def __init__(self) -> None:
        from mpfix.lsp_stream import AfterShutdown

        super().__init__("mpfix", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=AfterShutdown)
        self.linted: dict[str, Linted] = {}
        self.pending: dict[str, asyncio.TimerHandle] = {}

    def units(self):
        return impls.get(self.workspace.position_encoding, Utf16())

    def lint(self, uri: str) -> Linted | None:
        """Lint the document's current text (or reuse the last lint of that same text).

        None for a document the client never opened: pygls would read it from disk (a FIFO
        would block the server, a missing file raise)."""
        if not is_open(self.workspace, uri):
            return None
        document = self.workspace.get_text_document(uri)
        if not _is_python(document):
            return None
        text = document.source
        previous = self.linted.get(uri)
        if previous is not None and previous.text == text:
            return previous
        lines = Lines(text, self.units())
        path = _path_of(uri)
        findings: list[Finding] = []
        diagnostics: list[types.Diagnostic] = []
        if len(text) > MAX_BUFFER_CHARS:
            # A bound on the answer time: LibCST parses ~0.1-0.2 MB/s, so a 2 MB buffer took minutes.
            diagnostics.append(_error_diagnostic(
                f"mpfix: this buffer is {len(text) / 1e6:.1f} MB; the server lints buffers up to "
                f"{MAX_BUFFER_CHARS / 1e6:.2f} MB as you type (run `mpfix check` on the file)", lines))
            linted = self.linted[uri] = Linted(text, lines, findings, diagnostics)
            return linted
        try:
            self.bound_projects()
            result = api.lint_text(text, path)
        except ConfigError as exc:
            diagnostics.append(_error_diagnostic(f"mpfix: {exc}", lines))
        except Exception as exc:  # a bug in a rule must not take the server down
            logger.exception("mpfix failed on %s", uri)
            diagnostics.append(_error_diagnostic(
                f"internal error in mpfix ({type(exc).__name__}: {exc}); please report it", lines))
        else:
            findings = result.findings
            diagnostics = [_diagnostic_for(f, lines) for f in findings]
            diagnostics += [_error_diagnostic(e.message, lines, e.line, e.column) for e in result.errors]
        linted = self.linted[uri] = Linted(text, lines, findings, diagnostics)
        return linted

    def bound_projects(self) -> None:
        """Without a project marker, a document's project facts read the workspace folder holding it
        (what the editor opened), else the document's own folder, flat: never the server's working
        directory, which an editor may start anywhere (``mpfix.project``)."""
        from mpfix import policy, project

        folders = [_path_of(f.uri) for f in self.workspace.folders.values()]
        if not folders and self.workspace.root_path:
            folders = [Path(self.workspace.root_path)]
        if project.set_scope(project.scope_of(project.walkable_workspaces(f for f in folders if f.is_dir()))):
            policy.forget_projects()

    def publish_soon(self, uri: str) -> None:
        """Publish after a short pause in typing: a burst of changes costs one lint, of the last text."""
        pending = self.pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self.pending[uri] = asyncio.get_running_loop().call_later(DEBOUNCE_S, self.publish, uri)

    def publish(self, uri: str) -> None:
        pending = self.pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        if not is_open(self.workspace, uri):
            return  # closed meanwhile
        linted = self.lint(uri)
        if linted is None:
            return
        version = self.workspace.get_text_document(uri).version
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=linted.diagnostics))


def _overlaps(a: types.Range, b: types.Range) -> bool:
    def key(p: types.Position):
        return (p.line, p.character)

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def _contains(r: types.Range, p: types.Position) -> bool:
    return (r.start.line, r.start.character) <= (p.line, p.character) <= (r.end.line, r.end.character)


def _wanted(kind: str, only) -> bool:
    """Whether a code action of ``kind`` is among the kinds the client asked for (all when ``only`` is unset)."""
    if not only:
        return True
    return any(kind == str(k) or kind.startswith(f"{k}.") for k in only)


def fix_title(finding: Finding) -> str:
    safety = {FixSafety.SAFE: "safe fix", FixSafety.DISPLAY_ONLY: "display-only fix: only `mpfix repair` can prove it"}.get(
        finding.fix_safety, "unsafe fix: may change behaviour")
    return f"mpfix ({finding.code}): {finding.fix.description} [{safety}]"


def code_actions(server: MpfixServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    linted = server.lint(uri)
    if linted is None:
        return []
    only = params.context.only
    actions: list[types.CodeAction] = []
    if _wanted(types.CodeActionKind.QuickFix.value, only):
        for finding, diagnostic in zip(linted.findings, linted.diagnostics):
            if not _overlaps(diagnostic.range, params.range) or not finding.edits:
                continue
            if finding.fix_safety in (FixSafety.NONE, FixSafety.DISPLAY_ONLY):
                continue  # a display-only fix is proven only by running it (`mpfix repair`)
            actions.append(types.CodeAction(
                title=fix_title(finding),
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[diagnostic],
                is_preferred=finding.fix_safety is FixSafety.SAFE,
                edit=types.WorkspaceEdit(changes={uri: text_edits(linted.text, finding.edits, linted.lines)}),
            ))
        for finding, diagnostic in zip(linted.findings, linted.diagnostics):
            if not _overlaps(diagnostic.range, params.range):
                continue
            edit = _noqa_edit(uri, linted, finding)
            if edit is not None:
                actions.append(types.CodeAction(title=f"mpfix ({finding.code}): disable for this line",
                                                kind=types.CodeActionKind.QuickFix,
                                                diagnostics=[diagnostic], edit=edit))
    if _wanted(FIX_ALL_KIND, only) and any(f.fixable(False) for f in linted.findings):
        if linted.fix_all is None:
            linted.fix_all = _fix_all(uri, linted)
        if linted.fix_all:
            actions.append(types.CodeAction(title="mpfix: Fix all safe fixes in this file", kind=FIX_ALL_KIND,
                                            edit=types.WorkspaceEdit(changes={uri: linted.fix_all})))
    return actions


def _fix_all(uri: str, linted: Linted) -> list[types.TextEdit]:
    """The edits that apply every safe fix, until stable, as ``mpfix apply`` would (none if that fails)."""
    from mpfix.engine import text_edits as engine_edits

    try:
        result = api.lint_text(linted.text, _path_of(uri), fix=True, unsafe_fixes=False)
    except Exception:  # a settings error is already a diagnostic; a rule's bug must not stop the server
        logger.exception("mpfix could not fix %s", uri)
        return []
    if result.fixed_text is None or result.errors:
        return []
    return text_edits(linted.text, engine_edits(linted.text, result.fixed_text), linted.lines)


def _noqa_edit(uri: str, linted: Linted, finding: Finding) -> types.WorkspaceEdit | None:
    """The edit that adds ``# noqa: CODE`` where it suppresses ``finding`` (None when no line can hold it)."""
    from mpfix.engine import text_edits as engine_edits
    from mpfix.noqa import add_noqa_to_text

    new_text, added, _ = add_noqa_to_text(linted.text, [finding])
    if not added:
        return None

    return types.WorkspaceEdit(changes={uri: text_edits(linted.text, engine_edits(linted.text, new_text),
                                                        linted.lines)})


def hover(server: MpfixServer, params: types.HoverParams) -> types.Hover | None:
    from mpfix.codemods import rule_by_code
    from mpfix.rule_docs import explain

    linted = server.lint(params.text_document.uri)
    if linted is None:
        return None
    parts, seen, span = [], set(), None
    for finding, diagnostic in zip(linted.findings, linted.diagnostics):
        if not _contains(diagnostic.range, params.position) or finding.code in seen:
            continue
        rule = rule_by_code(finding.code)
        if rule is None:
            continue
        seen.add(finding.code)
        span = span or diagnostic.range
        parts.append(f"**{finding.code}**: {finding.message}\n\n{explain(rule)}\n[Documentation]({rule_url(finding.code)})")
    if not parts:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(parts)),
                       range=span)


def create_server() -> MpfixServer:
    from mpfix.project import file_records

    # Every save forgets the project facts (``did_save``); what the project scan read of each unchanged file is kept
    # in memory (the server lints without a cache folder), so a save re-reads the saved file, not the project
    # (tf-models: 449 ``ast`` parses per save before, turn 18).
    file_records.keep_in_memory()
    server = MpfixServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MpfixServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MpfixServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.publish_soon(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls: MpfixServer, params: types.DidSaveTextDocumentParams) -> None:
        # A save may change what the project says (a mixed policy set in another module,
        # [tool.mpfix] in pyproject.toml, a pinned TensorFlow, a new project root): scan again,
        # then lint every open document.
        from mpfix import policy

        policy.forget_projects()
        ls.linted.clear()
        for document in list(ls.workspace.text_documents.values()):
            ls.publish(document.uri)  # as the client spelt it (the keys are percent-decoded)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MpfixServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.linted.pop(uri, None)
        pending = ls.pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.SourceFixAll, FIX_ALL_KIND]))
    def on_code_action(ls: MpfixServer, params: types.CodeActionParams):
        return code_actions(ls, params)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def on_hover(ls: MpfixServer, params: types.HoverParams):
        return hover(ls, params)

    return server


def serve() -> None:
    import sys

    from mpfix import parse_probe
    from mpfix.lsp_stream import Realigned

    # Texts the client sends mid-edit rarely compile; LibCST's parse of each is bounded in a helper
    # process (this server runs threads, so it cannot fork one per text). Started now, not on the
    # first such keystroke.
    parse_probe.warm()
    create_server().start_io(stdin=Realigned(sys.stdin.buffer))
