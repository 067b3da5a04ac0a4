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

    /// One event acknowledged without handling because this release does not know its type
    /// (`unknown_type`) or its version (`unknown_version`). Rare, so the registry is asked each time.
    package func ignored(type: String, reason: String) {
        registry.makeCounter(
            name: "events_ignored_total", labels: [("type", type), ("reason", reason)],
            help: "Events left alone (acknowledged) because this release does not know their type or version"
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
                registry.makeCounter(name: "http_requests_total", labels: [("method", method), ("route", route), ("status", String(status))], help: "HTTP requests served"),
                registry.makeDurationHistogram(name: "http_request_duration_seconds", labels: [("method", method), ("route", route)], buckets: latencyBuckets, help: "HTTP request duration")
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
