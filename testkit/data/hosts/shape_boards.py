"""Write the board-telemetry parts of the recorded host trees and the tt-smi snapshots beside them.

Shaped, not captured: no Tenstorrent board exists where this project is built. The attribute names and units
are the public ones (tt-kmd's sysfs table and hwmon: tt_aiclk in MHz, tt_heartbeat a counter the ARC firmware
advances, tt_therm_trip_count, temp1_input in millidegrees C, power1_input in microwatts, curr1_input in
milliamps, in0_input in millivolts); the snapshots follow tt-smi's schema (tenstorrent/tt-smi@b878466
tt_smi/log.py): numbers as preformatted strings, an n300 as two chips `n300 L`/`n300 R`.
The values are plausible idle readings, not measurements. Run it from the repository root to rewrite them:
`python testkit/data/hosts/shape_boards.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
SMI = HERE.parent / "tt-smi"

# tree: (card type, boards, firmware, KMD, hwmon name, idle aiclk MHz, base temperature C, power W, serial base)
Spec = tuple[str, int, str, str, str, int, float, float, int]
HOSTS: dict[str, Spec] = {
    "n150": ("n150", 1, "18.10.0", "2.5.0", "wormhole", 500, 45.2, 21.3, 1000165127020),
    "n300": ("n300", 1, "18.6.0", "2.4.1", "wormhole", 500, 43.6, 38.9, 1000185117090),
    "t3k": ("n300", 4, "18.6.0", "2.1.0", "wormhole", 500, 44.1, 41.0, 1000185117002),
    "galaxy": ("galaxy-wormhole", 32, "18.8.0", "2.4.1", "wormhole", 800, 48.0, 52.5, 1000190400100),
    "p150": ("p150", 1, "18.12.0", "2.4.1", "blackhole", 1350, 52.4, 84.6, 1000231245015),
}
TRIP_C = 105  # therm_trip_l1_limit in the recorded T3K snapshot's limits
THROTTLE_C = 75  # its thm_limit


def write(path: Path, text: str, keep: bool = False) -> None:
    """Write `text` as a sysfs file reads back; `keep` leaves a file the older recording already holds."""
    if keep and path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n" if text else "")


def board_tree(root: Path, spec: Spec, index: int) -> None:
    card, _, firmware, _, hwmon_name, aiclk, temp, power, serial = spec
    node = root / "sys" / "class" / "tenstorrent" / f"tenstorrent!{index}"
    t = temp + 0.7 * index
    for name in ("tt_card_type", "tt_fw_bundle_ver", "tt_serial"):  # discovery's attributes, recorded before
        write(node / name, {"tt_card_type": card, "tt_fw_bundle_ver": firmware}.get(name, str(serial + index)), True)
    for name, value in (
        ("tt_aiclk", str(aiclk)),
        ("tt_arcclk", "540"),
        ("tt_axiclk", "960"),
        ("tt_heartbeat", str(118263 + 97 * index)),
        ("tt_therm_trip_count", "0"),
        ("tt_asic_id", f"{0x5A3C0000 + index:#x}"),
    ):
        write(node / name, value)
    write(root / "dev" / "tenstorrent" / str(index), "", True)
    hwmon = node / "device" / "hwmon" / f"hwmon{index + 2}"
    for name, value in (
        ("name", hwmon_name),
        ("temp1_label", "asic_temp"),
        ("temp1_input", str(round(t * 1000))),
        ("temp1_max", str(THROTTLE_C * 1000)),
        ("temp1_crit", str(TRIP_C * 1000)),
        ("power1_label", "power"),
        ("power1_input", str(round((power + 0.4 * index) * 1e6))),
        ("curr1_label", "current"),
        ("curr1_input", str(round(power / 0.8 * 1000))),
        ("in0_label", "vcore"),
        ("in0_input", "800"),
    ):
        write(hwmon / name, value)


def host_tree(name: str, spec: Spec) -> None:
    root = HERE / name
    boards, kmd = spec[1], spec[3]
    for index in range(boards):
        board_tree(root, spec, index)
    write(root / "sys" / "module" / "tenstorrent" / "version", kmd, True)
    pool = root / "sys" / "kernel" / "mm" / "hugepages" / "hugepages-1048576kB"
    if not (pool / "nr_hugepages").exists() and name != "p150":
        write(pool / "nr_hugepages", str(boards))
        write(pool / "free_hugepages", str(boards))
    if not (root / "proc" / "mounts").exists():
        write(
            root / "proc" / "mounts",
            "/dev/vda / ext4 rw,relatime 0 0\n"
            "hugetlbfs /dev/hugepages-1G hugetlbfs rw,relatime,pagesize=1024M 0 0".rstrip(),
        )
        write(root / "proc" / "meminfo", "MemTotal:       1056551120 kB\nMemAvailable:   1002460224 kB")


def chips(spec: Spec) -> list[tuple[int, str]]:
    """(board index, tt-smi board_type) per chip: an n300 is two chips."""
    card, boards = spec[0], spec[1]
    if card == "n300":
        return [(b, f"n300 {side}") for b in range(boards) for side in ("L", "R")]
    return [(b, card) for b in range(boards)]


def snapshot(name: str, spec: Spec) -> None:
    card, _, firmware, kmd, _, aiclk, temp, power, serial = spec
    devices = []
    for chip, (board, board_type) in enumerate(chips(spec)):
        devices.append(
            {
                "board_info": {
                    "bus_id": f"0000:{board + 1:02x}:00.0" if not board_type.endswith(" R") else "N/A",
                    "board_type": board_type,
                    "board_id": f"{serial + board:x}",
                    "coords": f"(0, {chip}, 0, 0)",
                    "dram_status": True,
                    "dram_speed": "16G" if card == "p150" else "12G",
                    "pcie_speed": 4,
                    "pcie_width": "16",
                },
                "telemetry": {
                    "voltage": " 0.80",
                    "current": f"{power / 0.8:5.1f}",
                    "aiclk": f"{aiclk:4d}",
                    "power": f"{power + 0.4 * board:5.1f}",
                    "board_power": f"{power * 1.9:5.1f}",
                    "asic_temperature": f"{temp + 0.7 * board:.1f}",
                    "fan_speed": "  35",
                    "heartbeat": str(118263 + 97 * board),
                },
                "firmwares": {
                    "fw_bundle_version": firmware,
                    "tt_flash_version": "3.1.0",
                    "cm_fw": "2.30.0.0",
                    "cm_fw_date": "2025-10-02",
                    "eth_fw": "7.0.0",
                    "dm_bl_fw": "N/A",
                    "dm_app_fw": "N/A",
                    "gddr_fw": "N/A",
                },
                "limits": {
                    "vdd_min": "0.70",
                    "vdd_max": "0.85",
                    "tdp_limit": "85",
                    "tdc_limit": "100",
                    "asic_fmax": "1000",
                    "therm_trip_l1_limit": str(TRIP_C),
                    "thm_limit": str(THROTTLE_C),
                    "bus_peak_limit": "N/A",
                    "board_power_limit": "N/A",
                },
            }
        )
    doc = {
        "time": "2026-12-05T09:12:44.120311",
        "host_info": {
            "OS": "Linux",
            "Distro": "Ubuntu 22.04.5 LTS",
            "Kernel": "6.8.0-48-generic",
            "Hostname": f"{name}-lab-01",
            "Platform": "x86_64",
            "Python": "3.10.12",
            "Memory": "503.80 GB",
            "Driver": f"TT-KMD {kmd}",
        },
        "host_sw_vers": {"tt_smi": "3.0.30", "pyluwen": "0.7.9", "tt_umd": "0.2.1"},
        "device_info": devices,
        "processes": [],
    }
    write(SMI / f"{name}-snapshot.json", json.dumps(doc, indent=2))


if __name__ == "__main__":
    for host, spec in HOSTS.items():
        host_tree(host, spec)
        if host != "t3k":  # the T3K snapshot predates this script (tests/host/test_host.py reads it as recorded)
            snapshot(host, spec)
