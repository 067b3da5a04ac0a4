import Foundation
import ServiceKitCore
import ServiceKitRedis

/// The event bus: which stream, which group, how patient.
public struct EventBusConfig: Sendable {
    public var stream: String
    /// `MAXLEN ~` on every `XADD`; entries older than this many are trimmed even if a group has not read them.
    public var maxLength: Int
    /// Entries older than this are trimmed from the stream and this group's dead-letter stream (by
    /// the relay, `XTRIM … MINID`), however few there are: event payloads carry personal data (a
    /// deleted account's allergies in `profile.updated`), which must not stay in Redis for as long as
    /// `maxLength` alone would keep it on a quiet system.
    package var retention: Duration
    public var group: String
    package var consumerName: String
    /// How long an entry may sit unacknowledged with a consumer before another replica claims it.
    package var claimIdle: Duration
    /// Deliveries after which a failing event goes to the dead-letter stream.
    package var maxDeliveries: Int
    /// How often the relay looks at the outbox when no commit of this process rang it (rows written by another process).
    package var relayPollInterval: Duration
    package var readBlock: Duration
    /// How long the relay keeps what it sent, to send it again if Redis comes back without its data
    /// (`OutboxRelay`); zero keeps nothing.
    package var replayWindow: Duration

    public init(
        stream: String = "events", maxLength: Int = 1_000_000, retention: Duration = .seconds(7 * 86_400), group: String, consumerName: String,
        claimIdle: Duration = .seconds(30), maxDeliveries: Int = 5, relayPollInterval: Duration = .seconds(2),
        readBlock: Duration = .seconds(2), replayWindow: Duration = .seconds(24 * 3_600)
    ) {
        self.stream = stream
        self.maxLength = maxLength
        self.retention = retention
        self.group = group
        self.consumerName = consumerName
        self.claimIdle = claimIdle
        self.maxDeliveries = maxDeliveries
        self.relayPollInterval = relayPollInterval
        self.readBlock = readBlock
        self.replayWindow = replayWindow
    }

    /// The dead-letter stream of this group.
    package var deadLetterStream: String { "\(stream):dead:\(group)" }

    public init(service: String, reading env: inout EnvironmentReader) {
        let defaultConsumer = "\(service)-\(System.hostName)-\(System.processID)"
        self.init(
            stream: env.string("EVENTS_STREAM", default: "events"),
            maxLength: env.int("EVENTS_MAXLEN", default: 1_000_000, range: 1_000...1_000_000_000),
            retention: .seconds(3_600 * env.int("EVENTS_RETENTION_HOURS", default: 168, range: 1...87_600)),
            group: service,
            consumerName: env.string("EVENTS_CONSUMER_NAME", default: defaultConsumer),
            claimIdle: env.milliseconds("EVENTS_CLAIM_IDLE_MS", default: 30_000, range: 100...86_400_000),
            maxDeliveries: env.int("EVENTS_MAX_DELIVERIES", default: 5, range: 1...1_000),
            relayPollInterval: env.milliseconds("EVENTS_RELAY_POLL_MS", default: 2_000, range: 10...600_000),
            readBlock: env.milliseconds("EVENTS_READ_BLOCK_MS", default: 2_000, range: 10...60_000),
            replayWindow: .seconds(3_600 * env.int("EVENTS_REPLAY_HOURS", default: 24, range: 0...8_760))
        )
    }
}
