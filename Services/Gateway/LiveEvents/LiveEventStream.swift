import Foundation
import Hummingbird
import HummingbirdCore
import ServiceKit
import ServiceLifecycle
import Synchronization

extension LiveEvents {
    /// Writes one client's stream until it ends: at the token's expiry, when the session ends or the
    /// account goes (`LiveEnding`), when the client is too far behind (it resumes), when the server
    /// shuts down, when the account's newer streams took its slot (`event: replaced`), or when the
    /// client goes (a write fails). Entries go out in id order, each once:
    /// `position` is the last id the client was given or skipped, and nothing at or before it is
    /// written again, whether it comes back from a reread or late from the subscription.
    func stream(_ start: Start, for holder: LiveTickets.Grant, lease: LiveLease, writer: inout any ResponseBodyWriter) async throws {
        do {
            try await writeStream(start, for: holder, lease: lease, writer: &writer)
        } catch {
            await lease.end()
            throw error
        }
        await lease.end()
        try await writer.finish(nil)
    }

    private func writeStream(_ start: Start, for holder: LiveTickets.Grant, lease: LiveLease, writer: inout any ResponseBodyWriter) async throws {
        try await writer.write(SSEFrame.retry(config.reconnectDelay))
        var position: StreamID
        switch start {
        case .reset(let at):
            position = at
            try await writer.write(SSEFrame.reset(at: at))
        case .replay(let entries, let from):
            position = from
            guard try await send(entries, user: holder.userID, session: holder.sessionID, position: &position, writer: &writer) else { return }
        }
        let signals = lease.registration.signals
        let continuation = lease.registration.continuation
        let slots = self.slots
        let heartbeat = config.heartbeat
        let user = holder.userID
        let slot = lease.slot
        // Past `exp`, not a second later: the verifier's leeway is for clocks, not for streams.
        let remaining = max(0, holder.expiresAt.timeIntervalSinceNow)
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: heartbeat)
                        if Task.isCancelled { return }
                        continuation.yield(.heartbeat)
                    }
                }
                group.addTask {
                    try? await Task.sleep(for: .seconds(remaining))
                    if !Task.isCancelled { continuation.finish() }
                }
                reading: for await signal in signals {
                    switch signal {
                    case .event(let id, let frame):
                        guard id > position else { continue }
                        try await writer.write(frame)
                        position = id
                    case .heartbeat:
                        try await writer.write(SSEFrame.ping)
                        // Only once the ping is written: a client that stopped reading (a phone that
                        // changed networks) stops renewing its slot, which lapses after three beats.
                        // A slot that lapsed is taken again, unless other streams took the room.
                        // Then the client is told it was replaced, and waits until it is next in use
                        // to connect again: reconnecting at once would take a newer stream's place in
                        // turn, and an account with more devices than slots would never settle.
                        guard await slots.touch(user: user, stream: slot) else {
                            try await writer.write(SSEFrame.replaced)
                            break reading
                        }
                    case .replaced:
                        try await writer.write(SSEFrame.replaced)
                        break reading
                    case .resync:
                        // Whatever the subscription missed is in the live stream. If Redis cannot be
                        // read, the stream ends and the client resumes from `position`.
                        let backlog = try await LiveStream.read(for: user, after: position, redis: redis)
                        switch backlog.resumption(after: position) {
                        case .replay(let entries):
                            guard try await send(entries, user: holder.userID, session: holder.sessionID, position: &position, writer: &writer) else { break reading }
                        case .reset:
                            // What was missed is gone from the stream; an ending among what is left
                            // still ends this one, as at its opening.
                            let ended = backlog.entries.contains { LiveEnding(type: $0.type, envelope: $0.envelope, of: user)?.ends(session: holder.sessionID) == true }
                            if ended { break reading }
                            position = backlog.end
                            try await writer.write(SSEFrame.reset(at: position))
                        }
                    }
                }
                group.cancelAll()
            }
        } onGracefulShutdown: {
            // The server waits for open answers to end: this one ends now.
            continuation.finish()
        }
    }

    /// Writes the entries after `position` that the client receives, and moves `position` past
    /// every one; false when one of them ends this stream.
    private func send(_ entries: [LiveStream.Entry], user: UUID, session: UUID?, position: inout StreamID, writer: inout any ResponseBodyWriter) async throws -> Bool {
        for entry in entries where entry.id > position {
            if let ending = LiveEnding(type: entry.type, envelope: entry.envelope, of: user), ending.ends(session: session) { return false }
            if let frame = SSEFrame.of(id: entry.id, type: entry.type, envelope: entry.envelope) {
                try await writer.write(frame)
            }
            position = entry.id
        }
        return true
    }
}

/// What an open stream holds: its registration with the hub, its place in the process's count, and
/// its slot among the user's streams. Given back once, when the stream ends; should the response never
/// be written (the client gone before its head), when it is dropped, the slot then lapsing in Redis
/// without heartbeats.
final class LiveLease: Sendable {
    let registration: LiveHub.Registration
    let slot: String
    private let hub: LiveHub
    private let slots: StreamSlots
    private let returned = Atomic<Bool>(false)

    init(hub: LiveHub, registration: LiveHub.Registration, slots: StreamSlots, slot: String) {
        self.hub = hub
        self.registration = registration
        self.slots = slots
        self.slot = slot
    }

    func end() async {
        guard giveBack() else { return }
        await slots.release(user: registration.user, stream: slot)
    }

    private func giveBack() -> Bool {
        guard !returned.exchange(true, ordering: .acquiringAndReleasing) else { return false }
        hub.unregister(registration)
        hub.unreserve()
        return true
    }

    deinit {
        _ = giveBack()
    }
}
