import FoodBackendAPI
import Foundation
import Testing

@testable import FoodBackendClient

@Suite(.timeLimit(.minutes(1))) struct LiveEventsTests {
    /// A server that answers `GET /v1/events` as `events` says, and every other path `404`.
    static func eventsServer(_ events: @escaping TestServer.Handler) async throws -> TestServer {
        try await TestServer { request in request.path == "/v1/events" ? await events(request) : .problem(.notFound, "not_found") }
    }

    /// A client signed in at `server`, reconnecting after `reconnectDelay`.
    static func signedIn(at server: TestServer, reconnectDelay: Duration = .milliseconds(20)) -> FoodBackend {
        FoodBackend(
            baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")),
            configuration: .init(reconnectDelay: reconnectDelay))
    }

    static func notification(_ id: String, kind: String = "follow") -> String {
        "id: \(id)\nevent: notification\ndata: {\"actor_id\":\"a-\(id)\",\"kind\":\"\(kind)\",\"notification_id\":\"n-\(id)\",\"occurred_at\":\"2026-11-25T01:11:56.123Z\",\"user_id\":\"u\"}\n\n"
    }

    @Test func aDroppedStreamResumesAfterTheLastWholeEventWithTheRefreshedToken() async throws {
        let seen = Seen()
        let old = testToken("old")
        let new = testToken("new")
        // The first connection drops once the client has its two whole events; the last stays open.
        let twoReceived = Gate()
        let allReceived = Gate()
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                seen.add("refresh")
                return .json(SessionTests.session(new, "refresh-2"))
            case "/v1/events":
                let token = request.bearer == old ? "old" : request.bearer == new ? "new" : "none"
                seen.add("open", "\(token) after \(request.headers.first(name: "Last-Event-ID") ?? "-")")
                switch seen.count("open") {
                case 1:
                    // Two whole events, then the third cut off in its data line: the connection drops.
                    return .stream(
                        ["retry: 20\n\n", ": ping\n\n", Self.notification("1-0"), Self.notification("2-0"), "id: 3-0\nevent: notification\ndata: {\"actor"],
                        pause: .milliseconds(5), closeAfter: twoReceived)
                case 2:
                    // The access token expired meanwhile.
                    return .problem(.unauthorized, "token_expired")
                default:
                    return .stream(
                        [Self.notification("3-0", kind: "follow_request"), "event: reset\nid: 9-0\ndata: {}\n\n"], pause: .milliseconds(5), closeAfter: allReceived)
                }
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let backend = FoodBackend(
            baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: old, refreshToken: "r")),
            configuration: .init(reconnectDelay: .milliseconds(20)))
        var received: [String] = []
        for try await event in backend.liveEvents() {
            switch event.kind {
            case .notification(let notification):
                received.append("\(event.id ?? "") \(notification.kind) \(notification.actorId)")
            case .reset:
                received.append("\(event.id ?? "") reset")
            case .connected:
                continue
            default:
                received.append("other")
            }
            if received.count == 2 { twoReceived.open() }
            if received.count == 4 { break }
        }
        allReceived.open()
        #expect(received == ["1-0 follow a-1-0", "2-0 follow a-2-0", "3-0 follow_request a-3-0", "9-0 reset"])
        // The next connection asked for what came after the last whole event, with the session's
        // token, refreshed once when it was refused as expired; no ticket was asked for.
        #expect(seen.all("open").prefix(3) == ["old after -", "old after 2-0", "new after 2-0"])
        #expect(seen.count("refresh") == 1)
        try await server.shutdown()
    }

    /// The session ended elsewhere (signed out everywhere, a password changed on another device):
    /// the stream throws it, and the app is signed out.
    @Test func aRevokedSessionEndsTheStreamWithItsErrorAndSignsOut() async throws {
        let server = try await Self.eventsServer { _ in .problem(.unauthorized, "session_revoked") }
        let store = InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        #expect(await backend.currentSession != nil)
        do {
            for try await _ in backend.liveEvents() { Issue.record("an event") }
            Issue.record("the stream ended without an error")
        } catch let error as FoodBackendError {
            #expect(error.code == .sessionRevoked)
        }
        #expect(await backend.currentSession == nil)
        #expect(await store.load() == nil)
        try await server.shutdown()
    }

    @Test func anEventThatCannotBeReadComesAsOtherAndTheStreamGoesOn() async throws {
        let received = Gate()
        let server = try await Self.eventsServer { _ in
            .stream(["id: 1-0\nevent: notification\ndata: {\"kind\":7}\n\n", Self.notification("2-0")], pause: .milliseconds(5), closeAfter: received)
        }
        let backend = Self.signedIn(at: server)
        var events: [String] = []
        for try await event in backend.liveEvents() {
            switch event.kind {
            case .connected: continue
            case .other(let name, let data): events.append("\(event.id ?? "") other \(name) \(data)")
            case .notification(let notification): events.append("\(event.id ?? "") \(notification.actorId)")
            default: events.append("unexpected")
            }
            if events.count == 2 { break }
        }
        received.open()
        #expect(events == [#"1-0 other notification {"kind":7}"#, "2-0 a-2-0"])
        try await server.shutdown()
    }

    /// A sign-out ends the stream by its next heartbeat, though the connection stays open (a logout
    /// the server could not be told of), and before any event it still sends: the next user's app
    /// never reads the last one's.
    @Test func aSignOutEndsTheStreamAtOnce() async throws {
        let first = Gate()
        let done = Gate()
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/events":
                // Heartbeats and an event after the sign-out, open until the test is done: only the
                // client can end it.
                let beats = Array(repeating: ": ping\n\n", count: 100)
                return .stream([Self.notification("1-0")] + beats + [Self.notification("2-0")] + beats, pause: .milliseconds(20), closeAfter: done)
            default:
                return .problem(.serviceUnavailable, "unavailable")
            }
        }
        let backend = Self.signedIn(at: server)
        let events = backend.liveEvents()
        let reader = Task {
            var received: [String] = []
            do {
                for try await event in events {
                    if case .notification = event.kind {
                        received.append(event.id ?? "")
                        first.open()
                    }
                }
                return (received, "ended")
            } catch let error as FoodBackendError {
                return (received, error.rawCode)
            } catch {
                return (received, "\(error)")
            }
        }
        await first.wait()
        await backend.signOut()
        let (received, end) = await reader.value
        #expect(received == ["1-0"])
        #expect(end == "not_signed_in")
        done.open()
        try await server.shutdown()
    }

    /// The account's newer streams took this one's place: the sequence says so and ends, without
    /// connecting again (which would take a newer stream's place in turn).
    @Test func aReplacedStreamEndsWithoutReconnecting() async throws {
        let seen = Seen()
        // Open until the client has read it all: a close right behind the last chunk can reach a
        // busy client first, and the event would be lost with the connection.
        let read = Gate()
        let server = try await Self.eventsServer { _ in
            seen.add("open")
            // A second connection is what must not happen: refused, it would end the sequence with an error.
            guard seen.count("open") == 1 else { return .problem(.forbidden, "forbidden") }
            return .stream(["retry: 20\n\n", Self.notification("1-0"), "event: replaced\ndata: {}\n\n"], pause: .milliseconds(5), closeAfter: read)
        }
        let backend = Self.signedIn(at: server)
        var received: [String] = []
        for try await event in backend.liveEvents() {
            switch event.kind {
            case .connected: received.append("connected")
            case .notification: received.append("\(event.id ?? "") notification")
            case .replaced: received.append("replaced")
            default: received.append("unexpected")
            }
        }
        read.open()
        #expect(received == ["connected", "1-0 notification", "replaced"])
        // Many times the reconnection delay: had it reconnected, the server would have seen it.
        try await Task.sleep(for: .milliseconds(300))
        #expect(seen.count("open") == 1)
        try await server.shutdown()
    }

    @Test func trainingEventsComeTyped() async throws {
        let received = Gate()
        let assigned =
            #"{"client_id":"c","coach_id":"k","dates":["2026-11-28","2026-11-30"],"occurred_at":"2026-11-28T09:00:00.000Z","session_ids":["s1","s2"],"workout_id":"w"}"#
        let logged = #"{"client_id":"c","coach_id":"k","occurred_at":"2026-11-28T09:01:00.000Z","session_id":"s1","status":"partial"}"#
        let comment =
            #"{"author_id":"k","author_role":"coach","comment_id":"m","occurred_at":"2026-11-28T09:02:00.000Z","session_id":"s1","text":"Nice"}"#
        let server = try await Self.eventsServer { _ in
            .stream(
                [
                    "id: 1-0\nevent: workout_assigned\ndata: \(assigned)\n\n", "id: 2-0\nevent: workout_logged\ndata: \(logged)\n\n",
                    "id: 3-0\nevent: workout_comment\ndata: \(comment)\n\n",
                ], pause: .milliseconds(5), closeAfter: received)
        }
        let backend = Self.signedIn(at: server)
        var events: [String] = []
        for try await event in backend.liveEvents() {
            switch event.kind {
            case .connected: continue
            case .workoutAssigned(let assigned): events.append("assigned \(assigned.workoutId) \(assigned.sessionIds) \(assigned.dates)")
            case .workoutLogged(let logged): events.append("logged \(logged.sessionId) \(logged.status) by \(logged.clientId)")
            case .workoutComment(let comment): events.append("comment \(comment.commentId) \(comment.authorRole) \(comment.text)")
            default: events.append("unexpected \(event.kind)")
            }
            if events.count == 3 { break }
        }
        received.open()
        #expect(
            events == [#"assigned w ["s1", "s2"] ["2026-11-28", "2026-11-30"]"#, "logged s1 partial by c", "comment m coach Nice"])
        try await server.shutdown()
    }

    @Test func theParserTakesOnlyWholeEvents() {
        var parser = ServerSentEventParser()
        parser.consume(Array("\u{FEFF}retry: 3000\r\n\r\nid: 1\r\nevent: a\r\ndata: x\r\ndata: y\r\n\r\n: comment\n\nid: 2\nevent: b\ndata: z".utf8))
        #expect(parser.next() == .init(id: "1", event: "a", data: "x\ny"))
        #expect(parser.next() == nil)
        #expect(parser.retry == 3000 && parser.lastEventID == "1")
        parser.consume(Array("\n\n".utf8))
        #expect(parser.next() == .init(id: "2", event: "b", data: "z"))
    }
}
