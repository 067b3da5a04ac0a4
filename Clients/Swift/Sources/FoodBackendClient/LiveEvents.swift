import FoodBackendAPI
import Foundation
import OpenAPIRuntime

/// One message of the live stream (`GET /v1/events`), typed by its `event` name. It is a hint to
/// reload what the app shows; `.reset` says events were missed and everything should be reloaded.
public struct LiveEvent: Sendable {
    /// Its place in the user's stream, sent back as `Last-Event-ID` on reconnecting.
    public let id: String?
    public let kind: Kind

    public enum Kind: Sendable {
        case notification(NotificationCreated)
        case rolesChanged(RolesChanged)
        case entitlementChanged(EntitlementChanged)
        case clientAccepted(ClientAccepted)
        case emailVerified(EmailVerified)
        /// To the client: the coach scheduled sessions.
        case workoutAssigned(WorkoutAssigned)
        /// To the coach: a client logged a session.
        case workoutLogged(WorkoutLogged)
        /// To the session's other party: a comment on it.
        case workoutComment(WorkoutComment)
        case reset
        /// The account's newer streams (on its other devices) took this one's place: the sequence
        /// ends after it, and does not reconnect. Open it again when the app is next in use
        /// (reconnecting at once would take a newer stream's place in turn).
        case replaced
        /// A connection opened (the first, or one after a drop): what the app shows may be loaded
        /// from now on without missing an event in between.
        case connected
        /// An event this client does not know yet, or one whose data it could not read (a field the
        /// server renamed, say), with its JSON data.
        case other(name: String, data: String)
    }

    public struct NotificationCreated: Decodable, Sendable {
        public let notificationId: String
        public let userId: String
        public let actorId: String
        /// `follow`, `follow_request` or `follow_accepted`.
        public let kind: String
        public let occurredAt: String?
    }

    public struct RolesChanged: Decodable, Sendable {
        public let userId: String
        public let roles: [String]
        public let occurredAt: String?
    }

    public struct EntitlementChanged: Decodable, Sendable {
        public let userId: String
        public let tier: String
        public let state: String
        public let occurredAt: String?
    }

    public struct ClientAccepted: Decodable, Sendable {
        public let coachId: String
        public let clientId: String
        public let occurredAt: String?
    }

    public struct EmailVerified: Decodable, Sendable {
        public let userId: String
        public let occurredAt: String?
    }

    public struct WorkoutAssigned: Decodable, Sendable {
        public let coachId: String
        public let clientId: String
        public let workoutId: String
        public let sessionIds: [String]
        /// The sessions' days (YYYY-MM-DD), in the order of `sessionIds`.
        public let dates: [String]
        public let occurredAt: String?
    }

    public struct WorkoutLogged: Decodable, Sendable {
        public let sessionId: String
        public let coachId: String
        public let clientId: String
        /// `completed` or `partial`.
        public let status: String
        public let occurredAt: String?
    }

    public struct WorkoutComment: Decodable, Sendable {
        public let sessionId: String
        public let commentId: String
        public let authorId: String
        /// `coach` or `client`.
        public let authorRole: String
        public let text: String
        public let occurredAt: String?
    }

    init(connectedAfter id: String?) {
        self.id = id
        kind = .connected
    }

    init(id: String?, name: String, data: String) {
        self.id = id
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        let bytes = Data(data.utf8)
        // One event this client cannot read must not end the stream: it comes as `.other`.
        func read<Payload: Decodable>(_ type: Payload.Type, _ make: (Payload) -> Kind) -> Kind {
            (try? decoder.decode(type, from: bytes)).map(make) ?? .other(name: name, data: data)
        }
        switch name {
        case "notification": kind = read(NotificationCreated.self, Kind.notification)
        case "roles_changed": kind = read(RolesChanged.self, Kind.rolesChanged)
        case "entitlement_changed": kind = read(EntitlementChanged.self, Kind.entitlementChanged)
        case "client_accepted": kind = read(ClientAccepted.self, Kind.clientAccepted)
        case "email_verified": kind = read(EmailVerified.self, Kind.emailVerified)
        case "workout_assigned": kind = read(WorkoutAssigned.self, Kind.workoutAssigned)
        case "workout_logged": kind = read(WorkoutLogged.self, Kind.workoutLogged)
        case "workout_comment": kind = read(WorkoutComment.self, Kind.workoutComment)
        case "reset": kind = .reset
        case "replaced": kind = .replaced
        default: kind = .other(name: name, data: data)
        }
    }
}

public typealias LiveEvents = AsyncThrowingStream<LiveEvent, any Error>

extension FoodBackend {
    /// The signed-in user's live events until the sequence is dropped, the session ends (then it
    /// throws the `FoodBackendError`: `.sessionRevoked` say, or `.notSignedIn` once the app signed
    /// out or another sign-in replaced the session, by the next heartbeat and before any event the
    /// server still sent) or the account's newer streams take its place (`.replaced`, then it ends). Each connection opens with the session's access token;
    /// when one ends (the access token's expiry, a dropped connection, a gateway restart) the next
    /// opens with the last event's id as `Last-Event-ID`, so nothing in between is missed. Keep one per app,
    /// stop it when the app goes to the background, and start it again when the app comes back.
    public func liveEvents(after lastEventID: String? = nil) -> LiveEvents {
        let (stream, continuation) = LiveEvents.makeStream(bufferingPolicy: .unbounded)
        let sessions = sessionManager
        let task = Task {
            // The session the stream is of: its events, and its last event's id, are nobody else's.
            // A sign-out the server could not be told of leaves the connection open.
            let of = await sessions.signedSession()
            func sessionEnded() async -> Bool {
                let now = await sessions.signedSession()
                guard of == nil || now != of else { return false }
                continuation.finish(throwing: FoodBackendError.notSignedIn)
                return true
            }
            var last = lastEventID
            var delay = configuration.reconnectDelay
            var failures = 0
            while !Task.isCancelled {
                if await sessionEnded() { return }
                var wait = delay
                do {
                    // With the access token, as every request (refreshed when it expired): a ticket is
                    // for clients that cannot set headers.
                    let opened = try await Self.unwrapping {
                        try await streamingAPI.getV1Events(headers: .init(lastEventID: last))
                    }
                    let body = try opened.ok.body.textEventStream
                    failures = 0
                    continuation.yield(LiveEvent(connectedAfter: last))
                    var parser = ServerSentEventParser()
                    for try await chunk in body {
                        if await sessionEnded() { return }
                        parser.consume(chunk)
                        if let retry = parser.retry { delay = .milliseconds(retry) }
                        while let message = parser.next() {
                            if let id = message.id, !id.isEmpty { last = id }
                            guard let name = message.event, !name.isEmpty else { continue }
                            let event = LiveEvent(id: message.id, name: name, data: message.data)
                            continuation.yield(event)
                            if case .replaced = event.kind {
                                continuation.finish()
                                return
                            }
                        }
                    }
                    // The server closed the stream (the token's end, a restart): reconnect after `retry`.
                    wait = delay
                } catch let error as FoodBackendError {
                    failures += 1
                    switch error.status {
                    case 429, 500...:
                        wait = error.retryAfter.map { .seconds($0) } ?? delay * min(failures, 10)
                    default:
                        continuation.finish(throwing: error)
                        return
                    }
                } catch is CancellationError {
                    break
                } catch {
                    // The connection dropped: reconnect after the wait, backing off while it keeps failing.
                    failures += 1
                    wait = delay * min(failures, 10)
                }
                // Jitter, so that every app does not come back in the same instant after a restart.
                let jitter = Duration.milliseconds(Int.random(in: 0...max(0, Int(wait.components.seconds * 100))))
                try? await Task.sleep(for: wait + jitter)
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}
