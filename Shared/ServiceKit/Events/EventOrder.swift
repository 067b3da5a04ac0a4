import Foundation
import Models

/// Where an event stands among one producer's events, for a consumer that must not let an older
/// event undo a newer one (a `client.unlinked` delivered after the acceptance that followed it).
///
/// `sequence` is the producer's outbox number (`EventEnvelope.sequence`), decided by its database
/// server; `occurredAt` is the clock of the process that wrote the event, which may be off by any
/// amount. Two orders compare by `sequence` when both have one, else by `occurredAt`: an envelope
/// relayed before envelopes carried a number, or an order stored from one, is ordered by the clock
/// as before.
public struct EventOrder: Sendable, Equatable {
    public let sequence: Int64?
    public let occurredAt: Date

    /// The order of `envelope` among `producer`'s events. An envelope from another producer keeps
    /// only its time: numbers of two outboxes do not compare.
    public init(_ envelope: EventEnvelope, among producer: String) {
        sequence = envelope.producer == producer ? envelope.sequence : nil
        occurredAt = envelope.occurredAt
    }
}
