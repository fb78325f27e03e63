"""`shardrec-plan`: command-line entry point (today: `shardrec-plan calibrate`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from shardrec_planner.calibration import calibrate
from shardrec_planner.report import format_bytes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shardrec-plan", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser(
        "calibrate",
        help="measure lookup and gloo collective bandwidth here and save them as JSON",
    )
    cal.add_argument("--out", default="shardrec_calibration.json", help="file to write")
    cal.add_argument("--ranks", type=int, default=2, help="gloo processes for the collective")
    cal.add_argument("--quick", action="store_true", help="smaller, noisier measurement")
    cal.add_argument(
        "--disk-dir",
        default=None,
        help="also measure the disk tier here (random row reads, free space)",
    )
    args = parser.parse_args(argv)

    assert args.command == "calibrate"
    result = calibrate(ranks=args.ranks, quick=args.quick, disk_dir=args.disk_dir)
    path = result.save(args.out)
    print(f"lookup bandwidth:     {format_bytes(result.lookup_bw)}/s")
    print(f"collective bandwidth: {format_bytes(result.intra_host_bw)}/s per rank")
    if result.disk_bw is not None and result.disk_free_bytes is not None:
        print(
            f"disk random reads:    {format_bytes(result.disk_bw)}/s, "
            f"{format_bytes(result.disk_free_bytes)} free"
        )
    print(f"saved to {path}; load with Topology.from_calibration({str(path)!r}, world_size=...)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
