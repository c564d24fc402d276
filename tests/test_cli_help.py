"""`infercast --help` reads like a manual: it opens with what infercast does, and every option of every
subcommand (nested ones included: `k8s build`, `actuator log`, `twin run`, ...) says what it is for."""

from __future__ import annotations

import argparse
import subprocess
import sys

from infercast.tools.cli import COMMANDS, build_parser
from tests.conftest import REPO


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
    """`infercast k8s build --image`-style names of the options and positionals without help text."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.help is None or not str(action.help).strip():
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            # a subcommand's line in its parent's listing ("build   write deploy/kubernetes/base ...")
            listed = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not (listed.get(name) or "").strip():
                    missing.append(f"{path} {name} (the subcommand itself)")
                missing += _undocumented(sub, f"{path} {name}")
    return missing


def _command_parser(name: str) -> argparse.ArgumentParser:
    # build_parser imports only the chosen command's module: build it once per command to see every option
    return _subparsers(build_parser([name]))[name]


def test_every_option_of_every_subcommand_has_help_text():
    missing = _undocumented(build_parser([]), "infercast")
    for name in COMMANDS:
        missing += _undocumented(_command_parser(name), f"infercast {name}")
    assert missing == [], "options that `--help` lists without saying what they do:\n" + "\n".join(missing)


def test_the_walk_finds_an_option_without_help():
    # the check above is only worth something if it sees an undocumented option, nested one level down
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers().add_parser("run", help="runs")
    sub.add_argument("--fast", action="store_true", help="go fast")
    sub.add_argument("--seed", type=int)
    assert _undocumented(parser, "x") == ["x run --seed"]


def test_help_opens_with_what_infercast_does():
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "--help"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert r.returncode == 0, r.stderr
    description = r.stdout.split("\n\n")[1]  # after the usage line
    assert "argument parsing" not in description
    for word in ("LLM inference", "forecast", "alert", "scale"):
        assert word in description, f"`infercast --help` does not say what infercast does ({word!r}): {description}"
    for name in COMMANDS:
        assert name in r.stdout


def test_every_command_loads_through_a_real_import():
    """The command table names each command's module by a real import inside a loader (not a string handed to
    importlib), so the layer check sees the command line's every edge; each loader gives the two functions the
    parser calls."""
    import ast
    import inspect

    from infercast.tools import cli

    assert "importlib" not in inspect.getsource(cli)
    for name, (loader, _help) in COMMANDS.items():
        tree = ast.parse(inspect.getsource(loader))
        assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree)), name
        command = loader()
        assert callable(command.add_arguments) and callable(command.run), name
