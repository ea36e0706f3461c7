"""New session: repository (recent, folder picker, or clone URL), base branch, task (with
images: attached or pasted, for a model that takes them), Plan/Act, auto-approve policy,
copies, endpoint, LoRA adapter, MCP servers. Validated inline while typing; the Create button
stays disabled until everything is right. Opened with ``open()``."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from workstation.ui import theme
from workstation.ui.backend import NewSessionRequest, SessionCommands
from workstation.ui.icons_fallback import safe_icon
from workstation.ui.image_tray import ImageTray

CLONE_URL = re.compile(r"^(https?://|ssh://|git://|file://|git@[^:]+:)\S+$")
BAD_REF = re.compile(r"(\s|\.\.|[~^:?*\[\\]|@\{|^-|/$|\.lock$|^/|//)")
MAX_COPIES = 64

AUTO_APPROVE = (
    ("reads", "Run reads, ask before edits and commands"),
    ("ask", "Ask before every action, reads too"),
    ("edits", "Run reads and file edits, ask before commands"),
    ("all", "Run everything (inside the session's limits)"),
)


def validate_repository(path_text: str, clone_url: str) -> str:
    """Plain-words problem with the repository fields, or ``""``."""
    path_text = path_text.strip()
    clone_url = clone_url.strip()
    if path_text and clone_url:
        return "Choose a folder or a clone URL, not both."
    if clone_url:
        if not CLONE_URL.match(clone_url):
            return "A clone URL starts with https://, ssh://, git://, file:// or git@host:"
        return ""
    if not path_text:
        return "Choose a repository folder, or give a URL to clone."
    path = Path(path_text).expanduser()
    if not path.exists():
        return "This folder does not exist."
    if not path.is_dir():
        return "This is a file, not a folder."
    if not (path / ".git").exists():
        return "This folder is not a git repository (no .git inside)."
    return ""


def validate_branch(name: str) -> str:
    name = name.strip()
    if not name:
        return ""  # the repository's current branch
    if BAD_REF.search(name):
        return "Not a valid branch name (no spaces, '..', '~', '^', ':' or a trailing '/')."
    return ""


def validate_task(task: str) -> str:
    return "" if task.strip() else "Say what the agent should do."


def validate_mcp_config(path_text: str) -> str:
    """Plain-words problem with the MCP servers file (empty field: none), or ``""``."""
    if not path_text.strip():
        return ""
    from workstation.agent.mcp_servers import load_servers
    from workstation.core.errors import UserError

    try:
        load_servers(path_text.strip())
    except UserError as exc:
        return str(exc)
    return ""


class NewSessionDialog(QDialog):
    submitted = Signal(object)
    """A :class:`NewSessionRequest`; the form stays open until :meth:`accept` (created) or
    :meth:`show_problem` (refused: everything typed stays)."""
    cancel_requested = Signal()
    """Cancel while the sessions are being made: stop making them."""

    def __init__(self, parent: QWidget | None, commands: SessionCommands | None = None, *,
                 repo_path: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("New session")
        self.setModal(True)
        self.setMinimumWidth(560)
        recent = list(commands.recent_repositories()) if commands is not None else []
        endpoints = list(commands.endpoint_names()) if commands is not None else []
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)

        self.repo = QComboBox()
        self.repo.setEditable(True)
        self.repo.addItems(recent)
        self.repo.setCurrentText(repo_path)
        self.repo.lineEdit().setPlaceholderText("A local git repository")
        browse = QPushButton(safe_icon("folder"), "Browse…")
        browse.clicked.connect(self._browse)
        repo_row = QHBoxLayout()
        repo_row.addWidget(self.repo, 1)
        repo_row.addWidget(browse)
        form.addRow("Repository", repo_row)
        self.clone_url = QLineEdit()
        self.clone_url.setPlaceholderText("…or a URL to clone (https://, ssh://, git@host:)")
        form.addRow("Clone URL", self.clone_url)
        self.repo_error = self._error_line(form)

        self.base_branch = QLineEdit()
        self.base_branch.setPlaceholderText("the repository's current branch")
        form.addRow("Base branch", self.base_branch)
        self.branch_error = self._error_line(form)

        self.task = QPlainTextEdit()
        self.task.setPlaceholderText("What should the agent do? e.g. “Fix the flaky test in tests/test_io.py”")
        self.task.setFixedHeight(96)
        form.addRow("Task", self.task)
        self.task_error = self._error_line(form)
        folder = commands.attachments_dir() if commands is not None else ""
        self.images = ImageTray(Path(folder) if folder else None)
        refusal = commands.images_refusal() if commands is not None else "no model to ask"
        self.images.set_allowed(not refusal, refusal)
        self.images.install_paste(self.task)
        self.images.problem.connect(lambda text: self._show(self.task_error, text, True))
        form.addRow("Images", self.images)

        mode_row = QHBoxLayout()
        self.plan = QRadioButton("Plan (read, propose)")
        self.act = QRadioButton("Act (edit, run)")
        self.act.setChecked(True)
        group = QButtonGroup(self)
        group.addButton(self.plan)
        group.addButton(self.act)
        mode_row.addWidget(self.plan)
        mode_row.addWidget(self.act)
        mode_row.addStretch(1)
        form.addRow("Mode", mode_row)

        self.auto_approve = QComboBox()
        for key, label in AUTO_APPROVE:
            self.auto_approve.addItem(label, key)
        form.addRow("Approvals", self.auto_approve)

        self.copies = QSpinBox()
        self.copies.setRange(1, MAX_COPIES)
        self.copies.setToolTip("Several sessions on the same task, each in its own worktree")
        form.addRow("Copies", self.copies)

        self.endpoint = QComboBox()
        for name in endpoints:
            self.endpoint.addItem(name, name)
        if not endpoints:  # the engine still starts: the session goes to whichever it is
            self.endpoint.addItem("the engine (once it is up)", "")
        form.addRow("Endpoint", self.endpoint)

        self.name = QLineEdit()
        self.name.setPlaceholderText("from the task")
        form.addRow("Name", self.name)

        self.adapter = QComboBox()
        self.adapter.addItem("none (the base model)", "")
        for name in (commands.adapter_names() if commands is not None else []):
            self.adapter.addItem(name, name)
        self.adapter.setEnabled(self.adapter.count() > 1)
        self.adapter.setToolTip("A LoRA adapter the engine serves (engine.lora_dir): the session's requests name it")
        form.addRow("Adapter", self.adapter)

        self.mcp_config = QLineEdit()
        self.mcp_config.setPlaceholderText('an mcpServers JSON file: {"mcpServers": {"NAME": {"command": …}}}')
        mcp_browse = QPushButton("Browse…")
        mcp_browse.clicked.connect(self._browse_mcp)
        mcp_row = QHBoxLayout()
        mcp_row.addWidget(self.mcp_config, 1)
        mcp_row.addWidget(mcp_browse)
        form.addRow("MCP servers", mcp_row)
        self.mcp_error = self._error_line(form)

        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.note.hide()
        self.problem = self._error_label()
        self.problem.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.create_button = self.buttons.addButton("Create", QDialogButtonBox.ButtonRole.AcceptRole)
        self.create_button.setDefault(True)
        self.buttons.accepted.connect(self._submit)
        self.buttons.rejected.connect(self._cancel)
        self.busy = False
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.note)
        layout.addWidget(self.problem)
        layout.addWidget(self.buttons)

        self._touched: set[str] = set()
        """Fields the user has edited: their errors show while typing, others' only on submit."""
        self.repo.currentTextChanged.connect(lambda _t: self._touched.add("repo"))
        self.clone_url.textChanged.connect(lambda _t: self._touched.add("repo"))
        self.task.textChanged.connect(lambda: self._touched.add("task"))
        for signal in (self.repo.currentTextChanged, self.clone_url.textChanged, self.base_branch.textChanged,
                       self.task.textChanged, self.mcp_config.textChanged):
            signal.connect(self.validate)
        if repo_path:
            self._touched.add("repo")
        self.validate()

    def _error_label(self) -> QLabel:
        label = QLabel("")
        label.setStyleSheet(f"color: {theme.RED.name()};")
        label.setTextFormat(Qt.TextFormat.PlainText)
        label.hide()
        return label

    def _error_line(self, form: QFormLayout) -> QLabel:
        """A field's error line, in a row that keeps its one line of height while the error
        is hidden (the form lays out no hidden widget, whatever its size policy) and asks for
        no width (the whole text in its tooltip): an error that comes and goes while typing
        resized the form, and its buttons moved under the pointer."""
        label = self._error_label()
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row = QWidget()
        row.setFixedHeight(label.fontMetrics().lineSpacing())
        box = QVBoxLayout(row)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(label)
        form.addRow("", row)
        return label

    def _show(self, label: QLabel, message: str, touched: bool) -> None:
        label.setText(message)
        label.setToolTip(message)
        label.setVisible(bool(message) and touched)

    def validate(self) -> bool:
        repo_problem = validate_repository(self.repo.currentText(), self.clone_url.text())
        branch_problem = validate_branch(self.base_branch.text())
        task_problem = validate_task(self.task.toPlainText())
        self._show(self.repo_error, repo_problem, "repo" in self._touched)
        self._show(self.branch_error, branch_problem, True)
        self._show(self.task_error, task_problem, "task" in self._touched)
        mcp_problem = validate_mcp_config(self.mcp_config.text())
        self._show(self.mcp_error, mcp_problem, True)
        ok = not (repo_problem or branch_problem or task_problem or mcp_problem)
        self.create_button.setEnabled(ok and not self.busy)
        return ok

    def _browse(self) -> None:
        dialog = QFileDialog(self, "Repository folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        dialog.fileSelected.connect(self.repo.setCurrentText)
        dialog.open()

    def request(self) -> NewSessionRequest:
        return NewSessionRequest(
            task=self.task.toPlainText().strip(),
            repo_path=str(Path(self.repo.currentText().strip()).expanduser()) if self.repo.currentText().strip() else "",
            clone_url=self.clone_url.text().strip(),
            base_branch=self.base_branch.text().strip(),
            mode="plan" if self.plan.isChecked() else "act",
            auto_approve=self.auto_approve.currentData(),
            copies=self.copies.value(),
            endpoint_name=self.endpoint.currentData() or "",
            name=self.name.text().strip(),
            adapter=self.adapter.currentData() or "",
            images=self.images.paths(),
            mcp_config=self.mcp_config.text().strip(),
        )

    def _browse_mcp(self) -> None:
        dialog = QFileDialog(self, "MCP servers (mcpServers JSON)", "", "JSON (*.json)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(self.mcp_config.setText)
        dialog.open()

    def set_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def set_busy(self, text: str) -> None:
        """Creating: the Create button says what happens, Cancel stops it."""
        self.busy = True
        self.problem.hide()
        self.create_button.setText(text)
        self.create_button.setEnabled(False)

    def show_problem(self, text: str) -> None:
        """Creating failed or was cancelled: say why; every field keeps what was typed."""
        self.busy = False
        self.create_button.setText("Create")
        self._show(self.problem, text, True)
        self.validate()

    def _cancel(self) -> None:
        if self.busy:
            self.cancel_requested.emit()
        else:
            self.reject()

    def _submit(self) -> None:
        self._touched.update({"repo", "task"})
        if self.busy or not self.validate():
            return
        self.submitted.emit(self.request())
