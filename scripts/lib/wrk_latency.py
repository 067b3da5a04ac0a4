"""wrk's latency figures in milliseconds: what scripts/bench/social and scripts/bench/auth judge
their p99 targets on."""


def ms(value):
    """wrk writes latencies as 850.00us, 12.34ms, 1.02s or 2.00m."""
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0), ("m", 60000.0)):
        if value.endswith(unit):
            return float(value[: -len(unit)]) * factor
    return float(value)
