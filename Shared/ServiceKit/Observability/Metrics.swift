import Prometheus

/// The Prometheus registry of one process, passed in as a value rather than bootstrapped globally,
/// so that tests can run several applications in one process.
public typealias MetricsRegistry = PrometheusCollectorRegistry

private let latencyBuckets: [Duration] = [
    .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
    .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
]

/// Counters and gauges of the event bus: what the relay moved, the outbox backlog, consumer lag,
/// failures and dead letters.
public struct EventBusMetrics: Sendable {
    public let relayed: Counter
    public let relayErrors: Counter
    public let outboxBacklog: Gauge
    public let handled: Counter
    public let duplicates: Counter
    public let handlerErrors: Counter
    public let deadLettered: Counter
    public let pending: Gauge
    public let lag: Gauge
    public let handleDuration: DurationHistogram
    /// From the event's `occurred_at` to its handler's commit.
    public let endToEnd: DurationHistogram

    public init(registry: MetricsRegistry) {
        relayed = registry.makeCounter(name: "events_relayed_total", help: "Outbox rows published to the event stream")
        relayErrors = registry.makeCounter(name: "events_relay_errors_total", help: "Failed relay batches (rows stay in the outbox)")
        outboxBacklog = registry.makeGauge(name: "events_outbox_backlog", help: "Outbox rows not yet published")
        handled = registry.makeCounter(name: "events_handled_total", help: "Events handled by this service's consumer")
        duplicates = registry.makeCounter(name: "events_duplicates_total", help: "Redelivered events found in the inbox and skipped")
        handlerErrors = registry.makeCounter(name: "events_handler_errors_total", help: "Handler failures (the event is retried)")
        deadLettered = registry.makeCounter(name: "events_dead_lettered_total", help: "Events moved to the dead-letter stream")
        pending = registry.makeGauge(name: "events_consumer_pending", help: "Entries delivered to the group and not acknowledged")
        lag = registry.makeGauge(name: "events_consumer_lag", help: "Entries in the stream the group has not read yet")
        handleDuration = registry.makeDurationHistogram(name: "events_handle_duration_seconds", buckets: latencyBuckets, help: "Time to handle one event")
        endToEnd = registry.makeDurationHistogram(name: "events_end_to_end_seconds", buckets: latencyBuckets, help: "Time from an event's occurrence to its handling")
    }
}

/// Request counts and durations by method, route and status.
public struct HTTPMetrics: Sendable {
    let registry: MetricsRegistry

    public init(registry: MetricsRegistry) {
        self.registry = registry
    }

    func record(method: String, route: String, status: Int, duration: Duration) {
        let labels = [("method", method), ("route", route), ("status", String(status))]
        registry.makeCounter(name: "http_requests_total", labels: labels, help: "HTTP requests served").increment()
        registry.makeDurationHistogram(name: "http_request_duration_seconds", labels: [("method", method), ("route", route)], buckets: latencyBuckets, help: "HTTP request duration").record(duration)
    }
}
