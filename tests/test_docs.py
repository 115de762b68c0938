"""The documentation site builds with ``mkdocs build --strict``: a page missing from the nav, a
broken link or anchor, or an API name the reference can no longer resolve fails the build. The
README's links into the docs are checked against the built site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict"]
    proc = subprocess.run(
        [*command, "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_the_site_builds_strict(site: Path) -> None:
    assert (site / "index.html").is_file()
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in (
        "asyncrl.train",
        "asyncrl.preset",
        "asyncrl.load",
        "asyncrl.Policy",
        "asyncrl.Callback",
        "asyncrl.tune.tune",
    ):
        assert f'id="{name}"' in api, f"the API reference lacks {name}"


def _readme_links() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # code blocks hold no links
    inline = re.findall(r"\]\(([^)\s]+)\)", text)
    defined = re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, flags=re.M)  # [label]: target
    return [t for t in inline + defined if not re.match(r"[a-z]+:", t)]


def test_readme_links_resolve(site: Path) -> None:
    links = _readme_links()
    assert links, "the README links to no file"
    for link in links:
        path, _, anchor = link.partition("#")
        if not path:
            continue  # an anchor of the README itself: GitHub's to resolve
        assert (ROOT / path).exists(), f"README links to {path}, which does not exist"
        if anchor and path.startswith("docs/") and path.endswith(".md"):
            page = path.removeprefix("docs/").removesuffix(".md")
            html = site / ("" if page == "index" else page) / "index.html"
            assert f'id="{anchor}"' in html.read_text(encoding="utf-8"), (
                f"README links to {link}: {path} has no heading or anchor {anchor!r}"
            )
