"""A site's upgrade as an Ansible playbook and inventory: the roll is Ansible's, each host's upgrade the appliance's.

Three plays over the site's appliances (one inventory group, from the site file):
1. fetch: `appliance upgrade --fetch` on every host at once brings the new generation's pinned weights into the
   host's model store and verifies them against their lock (nothing pinned: nothing to do); one failed fetch fails
   the whole run before any host leaves rotation (`any_errors_fatal`), so the time a host is out of rotation never
   includes a download.
2. judge: `appliance upgrade --check` on every host at once; one refusal or unreachable appliance fails the
   whole run before any host changes (`any_errors_fatal`).
3. upgrade: one host at a time (`serial: 1`), `appliance upgrade` with its gates; the appliance rolls itself back
   when a gate fails, the play waits for it to be serving again, and the roll stops there
   (`max_fail_percentage: 0`), the hosts after it untouched.

Each host's control token is read from the controller's environment by the variable the site file names
(`lookup('ansible.builtin.env', ...)` at run time) and handed to `appliance upgrade --token-file /dev/stdin`: no
value is written in the files, shown in Ansible's output or put in a process's arguments. The change is the
playbook's `upgrade_args` (overrides and `appliance upgrade` flags), set at render time and overridable with
`ansible-playbook -e`; every play passes the same, so the fetch composes the generation the judge and the upgrade
are asked for.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

from appliance.deploy.site_appliance import Appliance

__all__ = ["AnsibleFiles", "render_ansible"]

_GROUP = re.compile(r"[^A-Za-z0-9_]")
_READY_RETRIES, _READY_DELAY_S = 120, 5  # how long a rolled-back host may take to serve again: 10 minutes
_CHANGED: dict[str | None, bool | str] = {  # what each `appliance upgrade` mode changed, as Ansible reports it
    "--check": False,
    "--fetch": "'fetched:' in upgrade.stdout and 'already in the store' not in upgrade.stdout",
    None: "'upgrade passed' in upgrade.stdout",
}


@dataclass(frozen=True, slots=True)
class AnsibleFiles:
    inventory: str
    playbook: str


def render_ansible(
    site: str, entries: Sequence[Appliance], appliance: Sequence[str], upgrade_args: Sequence[str]
) -> AnsibleFiles:
    """The inventory of `entries` (group `site`) and the three-play upgrade playbook; `appliance` is the command
    that runs `appliance` on the hosts."""
    group = _GROUP.sub("_", site)
    hosts = {entry.name: _host_vars(entry) for entry in entries}
    inventory = {"all": {"children": {group: {"hosts": hosts}}}}
    variables = {"appliance_command": list(appliance), "upgrade_args": list(upgrade_args)}
    fetch = _everywhere_play(
        "fetch and verify the new generation's weights on every host",
        group,
        variables,
        _upgrade_task("the new generation's weights are in the store, verified", "--fetch"),
        "stop before any appliance leaves rotation",
    )
    judge = _everywhere_play(
        "judge the change on every appliance before any changes",
        group,
        variables,
        _upgrade_task("the appliance answers and accepts the new generation", "--check"),
        "stop before any appliance changes",
    )
    playbook = [fetch, judge, _upgrade_play(group, variables)]
    return AnsibleFiles(_dump(inventory), _dump(playbook))


def _host_vars(entry: Appliance) -> dict[str, Any]:
    host = urlsplit(entry.url).hostname or ""
    url = entry.url.rstrip("/")
    target = ["--url", url, "--token-file", "/dev/stdin", *(["--ca-file", entry.ca_file] if entry.ca_file else [])]
    found: dict[str, Any] = {
        "ansible_host": host,
        "appliance_url": url,
        "appliance_token_env": entry.token_env,
        "appliance_target": target,
    }
    if _loopback(host):
        found["ansible_connection"] = "local"  # an appliance on the controller itself: no ssh to it
        found["ansible_python_interpreter"] = "{{ ansible_playbook_python }}"
    if entry.ca_file:
        found["appliance_ca_file"] = entry.ca_file
    return found


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _upgrade_task(name: str, mode: str | None) -> dict[str, Any]:
    """`appliance upgrade` on the host; `mode`: `--fetch` or `--check` (changing nothing in the appliance), None:
    the upgrade itself."""
    flags = [mode] if mode else []
    argv = f"{{{{ appliance_command + ['upgrade'] + appliance_target + {flags} + upgrade_args }}}}"
    return {
        "name": name,
        # The token reaches the command on its stdin: neither its argv nor its environment (both in the process
        # list) nor the task's shown arguments (no_log; `said` shows the command's own last line) carry it.
        "ansible.builtin.command": {"argv": argv, "stdin": "{{ lookup('ansible.builtin.env', appliance_token_env) }}"},
        "no_log": True,
        "register": "upgrade",
        "changed_when": _CHANGED[mode],
    }


def _said(name: str) -> dict[str, Any]:
    """Fail with what `appliance upgrade` said last: its refusal on stderr (`error...`), else its outcome on stdout.
    Only the error lines of stderr count: a set-up step (`--build-dir`'s environment) reports progress there too.

    In a play over every host at once (`any_errors_fatal`), one host's failure sends every host here: a host whose
    own step passed says so, so only the failed hosts read as failures."""
    refusal = "(upgrade.stderr_lines | default([]) | select('match', 'error') | list)"
    said = f"(({refusal} or (upgrade.stdout_lines | default([]))) | last | default('appliance upgrade failed'))"
    msg = f"{{{{ {said} if upgrade is failed else 'stopped with the others (another host failed); here: ' ~ {said} }}}}"
    return {"name": name, "ansible.builtin.fail": {"msg": msg}}


def _everywhere_play(
    name: str, group: str, variables: dict[str, Any], task: dict[str, Any], stop: str
) -> dict[str, Any]:
    """`task` on every host at once (no serial); one failure fails the whole run, said as the command said it."""
    return {
        "name": name,
        "hosts": group,
        "gather_facts": False,
        "any_errors_fatal": True,
        "vars": variables,
        "tasks": [{"block": [task], "rescue": [_said(stop)]}],
    }


def _upgrade_play(group: str, variables: dict[str, Any]) -> dict[str, Any]:
    serving = {
        "name": "the appliance is serving (in rotation) again",
        "ansible.builtin.uri": {
            "url": "{{ appliance_url }}/readyz",
            "status_code": 200,
            "ca_path": "{{ appliance_ca_file | default(omit) }}",
        },
        "register": "ready",
        "until": "ready.status == 200",
        "retries": _READY_RETRIES,
        "delay": _READY_DELAY_S,
    }
    return {
        "name": "upgrade one appliance at a time behind its gates",
        "hosts": group,
        "gather_facts": False,
        "serial": 1,
        "max_fail_percentage": 0,
        "vars": variables,
        "tasks": [
            {
                "block": [
                    _upgrade_task("appliance upgrade (the appliance rolls itself back if a gate fails)", None),
                    serving,
                ],
                "rescue": [serving, _said("stop the roll at the failed gate")],
            }
        ],
    }


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True  # each play and task written out whole: anchors would make the playbook harder to read


def _dump(document: object) -> str:
    return "---\n" + yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=120)
