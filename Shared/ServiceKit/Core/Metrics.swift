import Prometheus
import Synchronization

/// The Prometheus registry of one process, passed in as a value rather than bootstrapped globally,
/// so that tests can run several applications in one process.
public typealias MetricsRegistry = PrometheusCollectorRegistry

private let latencyBuckets: [Duration] = [
    .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
    .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
]

/// Counters and gauges of the event bus: what the relay moved, the outbox backlog, consumer lag,
/// failures and dead letters.
package struct EventBusMetrics: Sendable {
    package let relayed: Counter
    package let relayErrors: Counter
    package let outboxBacklog: Gauge
    package let handled: Counter
    package let duplicates: Counter
    package let handlerErrors: Counter
    package let deadLettered: Counter
    package let pending: Gauge
    package let lag: Gauge
    package let handleDuration: DurationHistogram
    /// From the event's `occurred_at` to its handler's commit.
    package let endToEnd: DurationHistogram
    private let registry: MetricsRegistry

    package init(registry: MetricsRegistry) {
        self.registry = registry
        relayed = registry.makeCounter(descriptor: .init(metricName: "events_relayed", unitName: "total", helpText: "Outbox rows published to the event stream"))
        relayErrors = registry.makeCounter(descriptor: .init(metricName: "events_relay_errors", unitName: "total", helpText: "Failed relay batches (rows stay in the outbox)"))
        outboxBacklog = registry.makeGauge(descriptor: .init(metricName: "events_outbox_backlog", unitName: "", helpText: "Outbox rows not yet published"))
        handled = registry.makeCounter(descriptor: .init(metricName: "events_handled", unitName: "total", helpText: "Events handled by this service's consumer"))
        duplicates = registry.makeCounter(descriptor: .init(metricName: "events_duplicates", unitName: "total", helpText: "Redelivered events found in the inbox and skipped"))
        handlerErrors = registry.makeCounter(descriptor: .init(metricName: "events_handler_errors", unitName: "total", helpText: "Handler failures (the event is retried)"))
        deadLettered = registry.makeCounter(descriptor: .init(metricName: "events_dead_lettered", unitName: "total", helpText: "Events moved to the dead-letter stream"))
        pending = registry.makeGauge(descriptor: .init(metricName: "events_consumer_pending", unitName: "", helpText: "Entries delivered to the group and not acknowledged"))
        lag = registry.makeGauge(descriptor: .init(metricName: "events_consumer_lag", unitName: "", helpText: "Entries in the stream the group has not read yet"))
        handleDuration = registry.makeDurationHistogram(descriptor: .init(metricName: "events_handle_duration", unitName: "seconds", helpText: "Time to handle one event"), buckets: latencyBuckets)
        endToEnd = registry.makeDurationHistogram(
            descriptor: .init(metricName: "events_end_to_end", unitName: "seconds", helpText: "Time from an event's occurrence to its handling"), buckets: latencyBuckets)
    }

    /// One event acknowledged without handling because this release does not know its type
    /// (`unknown_type`) or its version (`unknown_version`). Rare, so the registry is asked each time.
    package func ignored(type: String, reason: String) {
        registry.makeCounter(
            descriptor: .init(metricName: "events_ignored", unitName: "total", helpText: "Events left alone (acknowledged) because this release does not know their type or version"),
            labels: [("type", type), ("reason", reason)]
        ).increment()
    }
}

/// Request counts and durations by method, route and status.
public struct HTTPMetrics: Sendable {
    package let registry: MetricsRegistry
    private let instruments = Instruments()

    public init(registry: MetricsRegistry) {
        self.registry = registry
    }

    /// The registry's counter and histogram for one method, route and status, made once: asking the
    /// registry for them on every request (it checks the name and the labels, under its lock) was 3%
    /// of a proxied request's instructions.
    public func record(method: String, route: String, status: Int, duration: Duration) {
        let key = InstrumentKey(method: method, route: route, status: status)
        let (counter, histogram) = instruments.cache.withLock { cache in
            if let found = cache[key] { return found }
            let made = (
                registry.makeCounter(
                    descriptor: .init(metricName: "http_requests", unitName: "total", helpText: "HTTP requests served"), labels: [("method", method), ("route", route), ("status", String(status))]),
                registry.makeDurationHistogram(
                    descriptor: .init(metricName: "http_request_duration", unitName: "seconds", helpText: "HTTP request duration"), labels: [("method", method), ("route", route)],
                    buckets: latencyBuckets)
            )
            cache[key] = made
            return made
        }
        counter.increment()
        histogram.record(duration)
    }

    private struct InstrumentKey: Hashable {
        var method: String
        var route: String
        var status: Int
    }

    private final class Instruments: Sendable {
        let cache = Mutex<[InstrumentKey: (Counter, DurationHistogram)]>([:])
    }
}
