"""An operator's typo answered with the fix: the nearest valid names, and the file and line that set it.

Every case runs the real command line on the real conf/ and real files; each answer is one line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testkit.helpers import Cli, Ran
from testkit.paths import ROOT

CPU_PAIR = ROOT / "conf" / "slots" / "cpu-pair.yaml"


def refused(done: Ran) -> str:
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done
    assert len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr


@pytest.mark.parametrize("override", ["serving.max_contxt=4096", "+serving.max_contxt=4096"])
def test_a_mistyped_key_gets_the_key_it_meant_not_hydras_append_advice(cli: Cli, override: str) -> None:
    line = refused(cli("validate", override))
    assert line.startswith("error[unknown-key] serving.max_contxt: `serving.max_contxt` is not a config key.")
    assert "Did you mean `serving.max_context`?" in line
    assert "append" not in line and "+serving" not in line


@pytest.mark.parametrize(("override", "meant"), [("model=tinny", "model=tiny"), ("mesh=n15O", "mesh=n150")])
def test_a_mistyped_group_option_gets_the_option_it_meant(cli: Cli, override: str, meant: str) -> None:
    assert f"Did you mean `{meant}`?" in refused(cli("validate", override))


def test_a_mistyped_site_file_key_names_the_file_the_line_and_the_key(cli: Cli, tmp_path: Path) -> None:
    site = tmp_path / "rack7.yaml"
    site.write_text("# @package _global_\nsite:\n  name: rack7\nserving:\n  max_contxt: 4096\n")
    line = refused(cli("validate", "site=rack7", "--site-dir", str(tmp_path)))
    assert f"`serving.max_contxt` is not a config key (set in {site.resolve()}:5)" in line
    assert "Did you mean `serving.max_context`?" in line
    assert "Did you mean `site=rack7`?" in refused(cli("validate", "site=rack", "--site-dir", str(tmp_path)))


def test_a_mistyped_host_file_key_names_the_file_and_the_line(cli: Cli, tmp_path: Path) -> None:
    host = tmp_path / "host.yaml"
    host.write_text("# @package _global_\n# this host's own port\nserving:\n  prot: 8001\n")
    line = refused(cli("validate", env={"APPLIANCE_HOST_FILE": str(host)}))
    assert f"(set in {host.resolve()}:4)" in line and "Did you mean `serving.port`" in line


def test_a_slots_file_and_its_slots_get_the_names_they_meant(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "slots").mkdir()
    pair = yaml.safe_load(CPU_PAIR.read_text())
    pair["slots"]["right"]["set"]["serving.prot"] = pair["slots"]["right"]["set"].pop("serving.port")
    mine = tmp_path / "slots" / "mine.yaml"
    mine.write_text(yaml.safe_dump(pair, sort_keys=False))
    set_line = next(i for i, text in enumerate(mine.read_text().splitlines(), 1) if "serving.prot" in text)
    line = refused(cli("validate", "slots=mine", "--site-dir", str(tmp_path)))
    assert line.startswith("error[unknown-key] slots.right.serving.prot: slot right: `serving.prot` is not")
    assert f"(set in {mine}:{set_line})" in line and "Did you mean `serving.port`" in line
    assert "Did you mean `slots=cpu-pair`?" in refused(cli("validate", "slots=cpu-par"))
    unknown_slot = refused(cli("validate", "slots=cpu-pair", "slots.lefft.serving.port=8009"))
    assert "cpu-pair has no slot 'lefft'. Did you mean `slots.left`?" in unknown_slot


def test_a_site_or_host_file_without_its_package_line_is_told_to_add_it(cli: Cli, tmp_path: Path) -> None:
    """Without `# @package _global_` Hydra nests a site file under `site` and the host file under `local`."""
    (tmp_path / "rack7.yaml").write_text("serving:\n  max_context: 4096\n")
    site = cli("validate", "site=rack7", "--site-dir", str(tmp_path))
    assert site.returncode == 2 and site.stderr.startswith("error[unknown-key] site.serving: ")
    assert "a site file's keys landed under `site`. Start the file with `# @package _global_`" in site.stderr
    (tmp_path / "host.yaml").write_text("serving:\n  port: 8001\n")
    host = refused(cli("validate", env={"APPLIANCE_HOST_FILE": str(tmp_path / "host.yaml")}))
    assert "the host file's keys landed under `local`. Start the file with `# @package _global_`" in host


def test_a_dotted_key_under_a_null_section_works_as_the_dict_form_does(cli: Cli, tmp_path: Path) -> None:
    """control.tls is null until set: its keys, spelled one by one, compose as `control.tls={...}` does, and the
    schema names whatever the section still lacks. Hydra's "+key" advice never appears for a key the schema has."""
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    dotted = cli("plan", "--json", f"control.tls.cert_file={cert}", f"control.tls.key_file={key}")
    whole = cli("plan", "--json", f"control.tls={{cert_file: {cert}, key_file: {key}}}")
    # Both reach the same verdict: the files do not exist, as serve would find (tls-file, the same line): a fact of
    # this host, exit 3.
    assert dotted.returncode == whole.returncode == 3
    assert json.loads(dotted.stdout) == json.loads(whole.stdout)
    assert json.loads(dotted.stdout)["findings"][0]["code"] == "tls-file"
    done = cli("validate", "control.tls.ca_file=ca.pem")
    assert done.returncode == 2 and "+control" not in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"error[missing-key] control.tls.{k}: `control.tls.{k}` has no value. Set control.tls.{k}=<value>"
        for k in ("cert_file", "key_file")
    ]
