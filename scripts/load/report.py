"""Prints a load run's summary (the JSON locustfile.py writes to LOAD_REPORT) as text.

Usage: report.py REPORT.json
"""
import json
import sys


def main():
    report = json.load(open(sys.argv[1]))
    overall = report["overall"]
    print(f"{report['users']} users, {report['seconds']} s measured (after the ramp): {report['requests']} requests, "
          f"{overall['per_second']}/s")
    print(f"{'route':48} {'count':>7} {'/s':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, route in sorted(report["routes"].items(), key=lambda item: -item[1]["count"]):
        print(f"{name:48} {route['count']:7} {route['per_second']:6} {route['p50']:8} {route['p95']:8} {route['p99']:8} {route['max']:8}")
    print(f"{'all (the event stream aside)':48} {report['requests']:7} {overall['per_second']:6} {overall['p50']:8} {overall['p95']:8} "
          f"{overall['p99']:8} {overall['max']:8}")
    streams = report["streams"]
    print(f"event streams: {streams['open_now']} open at the end, {streams['opened']} opened in all, {streams['messages']} messages read in the window")
    if report["errors"]:
        print(f"errors: {report['errors_total']}")
        for error in report["errors"]:
            print(f"  {error['route']:48} status {error['status']}: {error['count']}")
    else:
        print("errors: 0")
    print(f"CPU over the window ({report['cores']} cores, {report['cores_busy_percent']}% busy):")
    for name, used in sorted(report["cpu"].items(), key=lambda item: -item[1]["seconds"]):
        print(f"  {name:26} {used['seconds']:8.2f} s  {used['percent_of_a_core']:6.1f}% of a core, "
              f"waited {used.get('waited_for_a_core_seconds', 0):.2f} s for a core")


if __name__ == "__main__":
    main()
