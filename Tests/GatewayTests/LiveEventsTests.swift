import Foundation
@testable import Gateway
import Logging
import Models
import NIOCore
import ServiceKitCore
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

/// A gateway with its live event stream on the tests' Redis and a token issuer of the tests' own.
/// Events are put on users' live streams with the very script the outbox relay runs
/// (`LiveStream.publish`); ServiceKitTests checks that the relay runs it.
struct LiveGateway: Sendable {
    let issuer: TestIssuer
    let redis: RedisClient
    let port: Int
    /// The gateway's `EVENTS_STREAM`: the test's own.
    let stream: String

    /// Someone signed in: their id, their session and an access token for it.
    struct Person: Sendable {
        let id: UUID
        let session: UUID
        let token: String
    }

    func person(expiresIn: TimeInterval = 900) async throws -> Person {
        let id = UUID()
        let session = UUID()
        return Person(id: id, session: session, token: try await issuer.token(userID: id, sessionID: session, expiresIn: expiresIn))
    }

    /// Another token of the same person and session.
    func token(for person: Person, expiresIn: TimeInterval = 900) async throws -> String {
        try await issuer.token(userID: person.id, sessionID: person.session, expiresIn: expiresIn)
    }

    func open(_ person: Person, lastEventID: String? = nil) async throws -> SSEStream {
        try await SSEStream.open(port: port, token: person.token, lastEventID: lastEventID)
    }

    /// Publishes `payload` live to `to`, as the relay does; the event's own user is `eventUser`.
    @discardableResult
    func publish<Payload: EventPayload>(_ payload: Payload, to user: UUID, eventUser: UUID? = nil) async throws -> StreamID {
        let envelope = try EventEnvelope(payload, producer: "test", userID: eventUser ?? user)
        return try await LiveStream.publish(envelope: envelope.json, type: envelope.type, to: user, redis: redis)
    }

    /// A notification for `user`, with its id to recognise it by.
    @discardableResult
    func notify(_ user: UUID, id: UUID = UUID()) async throws -> (streamID: StreamID, notification: UUID) {
        (try await publish(NotificationCreated(notificationID: id, userID: user, kind: .follow, actorID: UUID()), to: user), id)
    }

    func ticket(for person: Person) async throws -> ConcurrentClient.Reply {
        try await ConcurrentClient.send(port: port, "POST", "/v1/events/ticket", headers: [("Authorization", "Bearer \(person.token)")])
    }

    /// Adds `payload` to the event stream as the relay does, without its live copy: an event the
    /// subscription never hears. `id`: the entry's id, when not Redis's next.
    @discardableResult
    static func relay<Payload: EventPayload>(_ payload: Payload, of user: UUID, to stream: String, id: String = "*", redis: RedisClient) async throws -> String {
        let envelope = try EventEnvelope(payload, producer: "auth", userID: user)
        let reply = try await redis.send(
            "XADD", RedisArgument(stream), RedisArgument(id), "id", RedisArgument(envelope.id.uuidString.lowercased()), "type", RedisArgument(envelope.type),
            "envelope", RedisArgument(envelope.json))
        return try #require(reply.string)
    }

    /// A stream entry id of `minutesAgo` minutes ago, for an entry added with its time.
    static func id(minutesAgo: Double) -> String {
        "\(UInt64((Date().timeIntervalSince1970 - minutesAgo * 60) * 1000))-0"
    }

    /// What the service behind the gateway was told of `token`: the gateway's mark, if any.
    func mark(_ token: String, sending extra: [(String, String)] = []) async throws -> String? {
        let reply = try await ConcurrentClient.send(port: port, "GET", "/v1/profiles/me", headers: [("Authorization", "Bearer \(token)")] + extra)
        try #require(reply.status == 200, "\(reply.json)")
        let echo = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: reply.body))
        return echo.headers["x-session-ended"]
    }
}

@Suite struct LiveEventsTests {
    static func withLiveGateway(
        heartbeat: Duration = .seconds(15), maxPerUser: Int = 5, maxConnections: Int = 10_000, clientTimeout: Duration = .seconds(60),
        redis redisServer: RedisConfiguration? = nil, everyServiceAt upstream: String? = nil, stream: String = "events-\(UUID())",
        firstReadWait: Duration = .seconds(5), _ body: @escaping @Sendable (LiveGateway) async throws -> Void
    ) async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        let redisConfig = try redisServer ?? TestEnvironment.redis()
        let redis = RedisClient(configuration: redisConfig, logger: TestEnvironment.logger)
        var config = GatewayTests.config(everyServiceAt: try upstream ?? "http://127.0.0.1:\(RedisServer.freePort())", timeout: .seconds(5))
        config.redis = redisConfig
        config.tokens = issuer.tokenConfig
        config.liveEvents = LiveEventsConfig(heartbeat: heartbeat, maxPerUser: maxPerUser, maxConnections: maxConnections, stream: stream, firstReadWait: firstReadWait)
        config.clientTimeout = clientTimeout
        do {
            try await buildApplication(config).test(.live) { client in
                try await body(LiveGateway(issuer: issuer, redis: redis, port: try #require(client.port), stream: stream))
            }
        } catch {
            await redis.close()
            throw error
        }
        await redis.close()
    }

    @Test func settingsAreReadFromTheEnvironment() throws {
        let config = try GatewayConfig.load(environment: [
            "AUTH_URL": "http://auth.internal:8080/", "REDIS_URL": "redis://:secret@redis.internal:6380/2", "SSE_HEARTBEAT_S": "1",
            "SSE_MAX_PER_USER": "2", "SSE_MAX_CONNECTIONS": "50", "JWT_ISSUER": "https://api.example.com",
        ])
        #expect(config.liveEvents.heartbeat == .seconds(1) && config.liveEvents.maxPerUser == 2 && config.liveEvents.maxConnections == 50)
        #expect(config.redis.host == "redis.internal" && config.redis.port == 6380 && config.redis.password == "secret" && config.redis.database == 2)
        // auth's keys, found from AUTH_URL unless JWKS_URL says otherwise.
        #expect(config.tokens.jwksURL == "http://auth.internal:8080/.well-known/jwks.json" && config.tokens.issuer == "https://api.example.com")
        let defaults = try GatewayConfig.load(environment: [:])
        #expect(defaults.liveEvents.heartbeat == .seconds(15) && defaults.liveEvents.maxPerUser == 5 && defaults.liveEvents.maxConnections == 10_000)
        #expect(throws: ConfigurationError.self) { try GatewayConfig.load(environment: ["SSE_HEARTBEAT_S": "0"]) }
        // In production the gateway must be told its Redis and its tokens' issuer.
        var production: [String: String] = ["APP_ENV": "production"]
        for service in GatewayConfig.services.keys { production["\(service.uppercased())_URL"] = "http://\(service):8080" }
        do {
            _ = try GatewayConfig.load(environment: production)
            Issue.record("a production gateway without REDIS_URL and JWT_ISSUER started")
        } catch let error as ConfigurationError {
            #expect(error.problems.contains { $0.hasPrefix("REDIS_URL") } && error.problems.contains { $0.hasPrefix("JWT_ISSUER") }, "\(error)")
        }
    }

    @Test func eventsArriveWithTheirIDNameAndData() async throws {
        try await Self.withLiveGateway { gateway in
            let coach = try await gateway.person()
            let stream = try await gateway.open(coach)
            defer { stream.close() }
            #expect(stream.status == 200)
            #expect(stream.headers["content-type"] == "text/event-stream")
            #expect(stream.headers["cache-control"] == "no-cache, no-transform")
            #expect(stream.headers["x-accel-buffering"] == "no")

            let client = UUID()
            let (notified, notification) = try await gateway.notify(coach.id)
            let roles = try await gateway.publish(UserRolesChanged(userID: coach.id, roles: [.user, .coach], added: [.coach], removed: []), to: coach.id)
            // Not sent to clients: not in the table.
            try await gateway.publish(FollowCreated(followerID: UUID(), followeeID: coach.id), to: coach.id)
            let entitlement = try await gateway.publish(
                EntitlementChanged(userID: coach.id, tier: "pro", state: "active", features: ["ai_suggestions": true]), to: coach.id)
            // The client's event, delivered to the coach.
            let accepted = try await gateway.publish(
                InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client), to: coach.id, eventUser: client)

            let events = try await stream.events(count: 4)
            #expect(events.map(\.event) == ["notification", "roles_changed", "entitlement_changed", "client_accepted"])
            #expect(events.compactMap(\.id) == [notified, roles, entitlement, accepted].map(\.description))
            #expect(stream.messages.first?.retry == "3000")
            let data = events[0].json
            #expect(data["notification_id"] as? String == notification.uuidString.lowercased())
            #expect(data["user_id"] as? String == coach.id.uuidString.lowercased() && data["kind"] as? String == "follow")
            #expect((data["occurred_at"] as? String).flatMap(RFC3339.strictDate(from:)) != nil)
            #expect(events[1].json["added"] as? [String] == ["coach"])
            #expect((events[2].json["features"] as? [String: Bool])?["ai_suggestions"] == true)
            #expect(events[3].json["client_id"] as? String == client.uuidString.lowercased())
            try await Task.sleep(for: .milliseconds(300))
            #expect(stream.events.count == 4)
        }
    }

    /// A client that reconnects with `Last-Event-ID` gets what it missed, then live events, each
    /// once, in order, even while events keep coming as it connects.
    @Test func resumingReplaysExactlyWhatWasMissed() async throws {
        // Closed streams count until the gateway's next heartbeat sees them gone.
        try await Self.withLiveGateway(maxPerUser: 20) { gateway in
            let person = try await gateway.person()
            let first = try await gateway.open(person)
            var published: [StreamID] = []
            for _ in 0..<5 { published.append(try await gateway.notify(person.id).streamID) }
            let seen = try await first.events(count: 5)
            #expect(seen.compactMap(\.id) == published.map(\.description))
            first.close()

            for _ in 0..<3 { published.append(try await gateway.notify(person.id).streamID) }
            // More while the second connection opens: some before its read, some after.
            let more = Task {
                var ids: [StreamID] = []
                for _ in 0..<22 { ids.append(try await gateway.notify(person.id).streamID) }
                return ids
            }
            let second = try await gateway.open(person, lastEventID: seen.last?.id)
            defer { second.close() }
            published += try await more.value
            let resumed = try await second.events(count: 25)
            #expect(resumed.compactMap(\.id) == published.dropFirst(5).map(\.description))
            try await Task.sleep(for: .milliseconds(300))
            #expect(second.events.count == 25)

            // The same through a ticket, with the id as a query parameter.
            let ticket = try #require(try await gateway.ticket(for: person).json["ticket"] as? String)
            let third = try await SSEStream.open(port: gateway.port, query: "?ticket=\(ticket)&last_event_id=\(published[27])")
            defer { third.close() }
            #expect(try await third.events(count: 2).compactMap(\.id) == published.suffix(2).map(\.description))
        }
    }

    /// An id whose successors were trimmed away, one the stream never gave, and one that is not an id
    /// at all: `event: reset`, then live events.
    @Test func lostOrUnknownIDsGetAReset() async throws {
        // Closed streams count until the gateway's next heartbeat sees them gone.
        try await Self.withLiveGateway(maxPerUser: 20) { gateway in
            let person = try await gateway.person()
            var published: [StreamID] = []
            for _ in 0..<10 { published.append(try await gateway.notify(person.id).streamID) }
            // Trimmed to the last five, as the cap does to a busy stream.
            try await gateway.redis.send("XTRIM", RedisArgument(LiveStream.key(for: person.id)), "MAXLEN", "5")

            // Right before the first kept entry: nothing lost.
            let kept = try await gateway.open(person, lastEventID: published[4].description)
            #expect(try await kept.events(count: 5).compactMap(\.id) == published.suffix(5).map(\.description))
            kept.close()

            for asked in [published[3].description, "99999999999999-0", "nonsense", "12-ab"] {
                let stream = try await gateway.open(person, lastEventID: asked)
                defer { stream.close() }
                let reset = try #require(try await stream.events(count: 1).first, "\(asked)")
                #expect(reset.event == "reset" && reset.data == "{}", "\(asked)")
                // It says where the stream stands, for the next reconnection.
                #expect(reset.id == published.last?.description, "\(asked)")
                let live = try await gateway.notify(person.id)
                published.append(live.streamID)
                let after = try await stream.events(count: 2)
                #expect(after.last?.event == "notification" && after.last?.id == live.streamID.description, "\(asked)")
            }
        }
    }

    @Test func ticketsAreSingleUseShortLivedAndBoundToTheirSession() async throws {
        try await Self.withLiveGateway { gateway in
            let person = try await gateway.person()
            let unsigned = try await ConcurrentClient.send(port: gateway.port, "POST", "/v1/events/ticket")
            #expect(unsigned.status == 401 && unsigned.json["code"] as? String == "unauthorized")

            let reply = try await gateway.ticket(for: person)
            #expect(reply.status == 200)
            let ticket = try #require(reply.json["ticket"] as? String)
            let expiresAt = try #require((reply.json["expires_at"] as? String).flatMap(RFC3339.strictDate(from:)))
            #expect(expiresAt.timeIntervalSinceNow > 50 && expiresAt.timeIntervalSinceNow <= 61)
            // Kept hashed, for 60 s.
            let keys = try await gateway.redis.send("KEYS", RedisArgument("sse:ticket:*")).array?.compactMap(\.string) ?? []
            #expect(keys.contains(LiveTickets.key(ticket)) && !keys.contains { $0.contains(ticket) }, "\(keys)")
            let ttl = try #require(try await gateway.redis.pttl(LiveTickets.key(ticket)))
            #expect(ttl > 50_000 && ttl <= 60_000)

            let stream = try await SSEStream.open(port: gateway.port, query: "?ticket=\(ticket)")
            defer { stream.close() }
            #expect(stream.status == 200)
            let (id, _) = try await gateway.notify(person.id)
            #expect(try await stream.events(count: 1).first?.id == id.description)

            // Once only; a made-up one, a malformed one, and one past its minute are no better.
            let again = try await SSEStream.open(port: gateway.port, query: "?ticket=\(ticket)")
            #expect(again.status == 401 && again.problem["code"] as? String == "invalid_ticket")
            let madeUp = try await SSEStream.open(port: gateway.port, query: "?ticket=\(OpaqueToken().value)")
            #expect(madeUp.status == 401 && madeUp.problem["code"] as? String == "invalid_ticket")
            let malformed = try await SSEStream.open(port: gateway.port, query: "?ticket=nope")
            #expect(malformed.status == 401 && malformed.problem["code"] as? String == "invalid_ticket")
            let late = try #require(try await gateway.ticket(for: person).json["ticket"] as? String)
            try await gateway.redis.send("PEXPIRE", RedisArgument(LiveTickets.key(late)), "1")
            try await Task.sleep(for: .milliseconds(20))
            let expired = try await SSEStream.open(port: gateway.port, query: "?ticket=\(late)")
            #expect(expired.status == 401 && expired.problem["code"] as? String == "invalid_ticket")

            // A ticket stands for its session: once the session ends, it opens nothing.
            let bound = try #require(try await gateway.ticket(for: person).json["ticket"] as? String)
            try await gateway.publish(SessionsEnded(userID: person.id, sessionIDs: [person.session], all: false), to: person.id)
            try await stream.waitUntilEnded()
            #expect(!stream.events.contains { $0.event == "replaced" }, "an ended session is not a replaced stream")
            let revoked = try await SSEStream.open(port: gateway.port, query: "?ticket=\(bound)")
            #expect(revoked.status == 401 && revoked.problem["code"] as? String == "session_revoked")
        }
    }

    @Test func aStreamNeedsAGoodToken() async throws {
        try await Self.withLiveGateway { gateway in
            let anonymous = try await SSEStream.open(port: gateway.port)
            #expect(anonymous.status == 401 && anonymous.problem["code"] as? String == "unauthorized")
            #expect(anonymous.headers["content-type"] == Problem.mediaType)
            let expired = try await SSEStream.open(port: gateway.port, token: try await gateway.issuer.token(expiresIn: -120))
            #expect(expired.status == 401 && expired.problem["code"] as? String == "token_expired")
            // Past its expiry but within the verifier's leeway: a stream would end at once.
            let ending = try await SSEStream.open(port: gateway.port, token: try await gateway.issuer.token(expiresIn: -1))
            #expect(ending.status == 401 && ending.problem["code"] as? String == "token_expired")
            let forged = try await SSEStream.open(port: gateway.port, token: try await gateway.issuer.token(issuer: "https://elsewhere.test"))
            #expect(forged.status == 401 && forged.problem["code"] as? String == "invalid_token")
            let garbage = try await SSEStream.open(port: gateway.port, token: "not-a-token")
            #expect(garbage.status == 401 && garbage.problem["code"] as? String == "invalid_token")
        }
    }

    @Test func aStreamEndsWhenItsTokenExpires() async throws {
        try await Self.withLiveGateway { gateway in
            // A first stream has the gateway fetch the issuer's keys, which a loaded machine can take
            // seconds to do: the short-lived token below is then checked at once.
            let warming = try await gateway.open(try await gateway.person())
            #expect(warming.status == 200)
            warming.close()
            let person = try await gateway.person(expiresIn: 6)
            let opened = ContinuousClock.now
            let stream = try await gateway.open(person)
            defer { stream.close() }
            #expect(stream.status == 200)
            try await stream.waitUntilEnded(within: .seconds(15))
            let lasted = try #require(stream.endedAt) - opened
            // `exp` is in whole seconds: the token lasts between five and six.
            #expect(lasted > .seconds(2) && lasted < .seconds(10), "\(lasted)")
        }
    }

    /// A service takes a token until it expires; the gateway marks one whose session it heard end
    /// (`user.sessions_ended`, as a sign-out or a takeover sends it), or whose account was deleted,
    /// for the service to refuse where a caller is needed (`X-Session-Ended`, which only the gateway
    /// sets): a token it verified before, and one it never saw, alike. Only the sessions named
    /// end: the person's other session, and everyone else, go on unmarked.
    @Test func anEndedSessionsTokenIsMarkedForTheServices() async throws {
        let upstream = EchoUpstream(name: "social")
        try await upstream.start()
        defer { upstream.stop() }
        try await Self.withLiveGateway(everyServiceAt: upstream.baseURL) { gateway in
            let person = try await gateway.person()
            let otherSession = try await gateway.issuer.token(userID: person.id, sessionID: UUID())
            let someoneElse = try await gateway.person()
            let deleted = try await gateway.person()
            @Sendable func mark(_ token: String, sending extra: [(String, String)] = []) async throws -> String? { try await gateway.mark(token, sending: extra) }
            @Sendable func marked(_ token: String) async throws -> Bool { try await mark(token) == "1" }
            // Nothing ended yet; a client's own mark does not pass the edge.
            for token in [person.token, otherSession, someoneElse.token, deleted.token] { #expect(try await mark(token, sending: [("X-Session-Ended", "1")]) == nil) }
            // Verified here (a ticket checks the token): it is among the gateway's verified tokens.
            #expect(try await gateway.ticket(for: person).status == 200)

            // An ending counts for the user it is about, not for another whose channel carried it.
            let stranger = UUID()
            try await gateway.publish(UserDeleted(userID: stranger), to: someoneElse.id, eventUser: stranger)
            try await gateway.publish(SessionsEnded(userID: person.id, sessionIDs: [person.session], all: true), to: person.id)
            try await gateway.publish(UserDeleted(userID: deleted.id), to: deleted.id)
            try await waitUntil(.seconds(10)) { try await marked(person.token) }
            // Another token of the ended session, never seen here: its payload names the session.
            #expect(try await marked(try await gateway.token(for: person)))
            try await waitUntil(.seconds(10)) { try await marked(deleted.token) }
            // Matched by session, never by time: `all` ended the sessions it named, not a later one.
            #expect(try await mark(otherSession) == nil)
            #expect(try await mark(someoneElse.token) == nil)
            // A token the gateway cannot read at all is the service's to refuse.
            #expect(try await mark("not-a-token") == nil)
        }
    }

    /// A gateway that starts (a deploy, a restart) has heard nothing on its subscription yet: before
    /// its port opens it reads the endings of a little over the last generation from the event
    /// stream, as the relay wrote them there, page after page, and marks their tokens from its first
    /// request on, one of 14 minutes ago among them (a token of its session may still be taken). An
    /// ending older than any token that could still be of its session is not read.
    @Test func aGatewayStartedAfterSessionsEndedMarksTheirTokens() async throws {
        let upstream = EchoUpstream(name: "social")
        try await upstream.start()
        defer { upstream.stop() }
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        defer { Task { await redis.close() } }
        let stream = "events-\(UUID())"
        let (signedOut, deleted, longAgo, lately, someoneElse) = (UUID(), UUID(), UUID(), UUID(), UUID())
        let (session, otherSession, oldSession, lateSession) = (UUID(), UUID(), UUID(), UUID())
        try await LiveGateway.relay(
            SessionsEnded(userID: longAgo, sessionIDs: [oldSession], all: false), of: longAgo, to: stream, id: LiveGateway.id(minutesAgo: 20), redis: redis)
        try await LiveGateway.relay(
            SessionsEnded(userID: lately, sessionIDs: [lateSession], all: false), of: lately, to: stream, id: LiveGateway.id(minutesAgo: 14), redis: redis)
        try await LiveGateway.relay(SessionsEnded(userID: signedOut, sessionIDs: [session], all: false), of: signedOut, to: stream, redis: redis)
        // Ten pages of other services' events between the endings: a read the port did not wait
        // for would still be under way at the first request.
        for _ in 0..<(EndingsCatchUp.page * 10 + 100) {
            try await LiveGateway.relay(NotificationCreated(notificationID: UUID(), userID: someoneElse, kind: .follow, actorID: UUID()), of: someoneElse, to: stream, redis: redis)
        }
        try await LiveGateway.relay(UserDeleted(userID: deleted), of: deleted, to: stream, redis: redis)
        // However slowly two shared cores read it.
        try await Self.withLiveGateway(everyServiceAt: upstream.baseURL, stream: stream, firstReadWait: .seconds(60)) { gateway in
            @Sendable func token(_ user: UUID, _ session: UUID) async throws -> String { try await gateway.issuer.token(userID: user, sessionID: session) }
            let deletedMark = try await gateway.mark(token(deleted, UUID()))
            #expect(deletedMark == "1")
            #expect(try await gateway.mark(token(signedOut, session)) == "1")
            #expect(try await gateway.mark(token(signedOut, otherSession)) == nil)
            #expect(try await gateway.mark(token(lately, lateSession)) == "1")
            #expect(try await gateway.mark(token(longAgo, oldSession)) == nil)
            #expect(try await gateway.mark(token(someoneElse, UUID())) == nil)
        }
    }

    /// Redis refusing the first read does not keep a starting gateway's port closed for the wait:
    /// the port opens once the read has been tried, and the subscription reads when Redis is back.
    @Test func aGatewayWhoseRedisRefusesOpensItsPortAtOnce() async throws {
        let refusing = try #require(RedisConfiguration(url: "redis://127.0.0.1:\(try RedisServer.freePort())"))
        let started = ContinuousClock.now
        try await Self.withLiveGateway(redis: refusing, firstReadWait: .seconds(60)) { gateway in
            #expect(ContinuousClock.now - started < .seconds(30), "the port opened only after the wait for the read")
        }
    }

    /// A stream trimmed (`EVENTS_MAXLEN`) inside the window a read covers is told, with the first
    /// entry it kept: the endings before it cannot be read. One whose first kept entry is before the
    /// window, never trimmed, or not made yet is not.
    @Test func aReadOfAStreamTrimmedInsideItsWindowSaysSo() async throws {
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        defer { Task { await redis.close() } }
        let stream = "events-\(UUID())"
        let catchUp = EndingsCatchUp(redis: redis, stream: stream, ended: EndedSessions(), logger: TestEnvironment.logger)
        let (gone, kept, later) = (UUID(), UUID(), UUID())
        #expect(try await catchUp.read(since: Date().addingTimeInterval(-1_020)) == EndingsCatchUp.Read(endings: 0, keptFrom: nil))
        _ = try await LiveGateway.relay(UserDeleted(userID: gone), of: gone, to: stream, id: LiveGateway.id(minutesAgo: 12), redis: redis)
        let first = try await LiveGateway.relay(UserDeleted(userID: kept), of: kept, to: stream, id: LiveGateway.id(minutesAgo: 8), redis: redis)
        _ = try await LiveGateway.relay(UserDeleted(userID: later), of: later, to: stream, id: LiveGateway.id(minutesAgo: 2), redis: redis)
        #expect(try await catchUp.read(since: Date().addingTimeInterval(-1_020)) == EndingsCatchUp.Read(endings: 3, keptFrom: nil))
        // Trimmed as `XADD … MAXLEN` trims: from the oldest entry on.
        _ = try await redis.send("XTRIM", RedisArgument(stream), "MAXLEN", "2")
        #expect(try await catchUp.read(since: Date().addingTimeInterval(-1_020)) == EndingsCatchUp.Read(endings: 2, keptFrom: StreamID(first)))
        #expect(try await catchUp.read(since: Date().addingTimeInterval(-300)) == EndingsCatchUp.Read(endings: 1, keptFrom: nil))
    }

    /// Redis goes away and comes back: an ending its subscription did not hear (here one added to
    /// the event stream without its live copy, as one published while the gateway was away would be)
    /// is read from the stream once the gateway has subscribed again, and its token marked. That read
    /// starts a minute before the subscription was last known up, not a generation back: an entry
    /// of five minutes ago that the first read did not find is not read again.
    @Test func anEndingTheSubscriptionMissedIsReadAfterRedisComesBack() async throws {
        let earlier = UUID()
        try await Self.withGatewayOnARedisOfItsOwn { server, first, gateway in
            let person = try await gateway.person()
            try await waitUntil(.seconds(10)) { try await gateway.mark(try await gateway.issuer.token(userID: first, sessionID: UUID())) == "1" }
            // The subscription is up (it carries a notification), then misses the endings.
            let events = try await gateway.open(person)
            defer { events.close() }
            try await gateway.notify(person.id)
            _ = try await events.events(count: 1)
            try await LiveGateway.relay(UserDeleted(userID: earlier), of: earlier, to: gateway.stream, id: LiveGateway.id(minutesAgo: 5), redis: gateway.redis)
            try await LiveGateway.relay(SessionsEnded(userID: person.id, sessionIDs: [person.session], all: false), of: person.id, to: gateway.stream, redis: gateway.redis)
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await gateway.mark(person.token) == nil)

            try await server.stop()
            try await server.start()
            try await waitUntil(.seconds(30)) { try await gateway.mark(person.token) == "1" }
            #expect(try await gateway.mark(try await gateway.issuer.token(userID: earlier, sessionID: UUID())) == nil)
        }
    }

    /// The subscription is known up at each answer to the subscriber's `PING` (every 5 s), not only
    /// when it started: after a quiet while, a reconnection reads from a minute before the last
    /// answer. An ending from before that, which the subscription would have carried, is not read
    /// again; one after it is.
    @Test func aReconnectionReadsFromTheLastAnswerToAPing() async throws {
        let (heard, missed) = (UUID(), UUID())
        try await Self.withGatewayOnARedisOfItsOwn { server, first, gateway in
            @Sendable func marked(_ user: UUID) async throws -> Bool { try await gateway.mark(try await gateway.issuer.token(userID: user, sessionID: UUID())) == "1" }
            try await waitUntil(.seconds(10)) { try await marked(first) }
            // Quiet, past a few answers: the subscription started at least 18 s before `heard`'s time
            // plus a minute, and Redis answered a ping sent within the last 5 s or so.
            try await Task.sleep(for: .seconds(18))
            try await LiveGateway.relay(UserDeleted(userID: heard), of: heard, to: gateway.stream, id: LiveGateway.id(minutesAgo: 71.0 / 60), redis: gateway.redis)
            try await LiveGateway.relay(UserDeleted(userID: missed), of: missed, to: gateway.stream, redis: gateway.redis)

            try await server.stop()
            try await server.start()
            try await waitUntil(.seconds(30)) { try await marked(missed) }
            #expect(try await !marked(heard))
        }
    }

    /// A gateway on a Redis server of the test's own, which `body` may stop and start, with an
    /// echoing service behind it. Its event stream holds one ending of ten minutes ago, of the user
    /// `body` is given: what the gateway's first read finds, so that the test knows when it is done.
    static func withGatewayOnARedisOfItsOwn(_ body: @escaping @Sendable (RedisServer, UUID, LiveGateway) async throws -> Void) async throws {
        let upstream = EchoUpstream(name: "social")
        try await upstream.start()
        defer { upstream.stop() }
        let server = try RedisServer()
        try await server.start()
        let stream = "events-\(UUID())"
        let first = UUID()
        let redis = RedisClient(configuration: server.configuration, logger: TestEnvironment.logger)
        try await LiveGateway.relay(UserDeleted(userID: first), of: first, to: stream, id: LiveGateway.id(minutesAgo: 10), redis: redis)
        await redis.close()
        try await withLiveGateway(redis: server.configuration, everyServiceAt: upstream.baseURL, stream: stream) { gateway in
            try await body(server, first, gateway)
        }
        try await server.stop()
    }

    /// What ended is kept from one to two generations (longer than a token lives), and for at most
    /// `capacity` users a generation, past which a new user's ending is not kept rather than one
    /// heard before pushed out; what a user's entries ended adds up.
    @Test func endedSessionsAreKeptAsLongAsATokenLives() {
        let start = ContinuousClock.now
        let ended = EndedSessions(capacity: 2, logger: TestEnvironment.logger, now: start)
        let (first, second, third) = (UUID(), UUID(), UUID())
        let (session, later) = (UUID(), UUID())
        #expect(!ended.ended(user: first, session: session, now: start))
        ended.record(LiveEnding(sessionIDs: [session], everyStream: false, sessionless: false), of: first, now: start)
        ended.record(LiveEnding(sessionIDs: [later], everyStream: false, sessionless: true), of: first, now: start + .seconds(1))
        #expect(ended.ended(user: first, session: session, now: start + .seconds(2)) && ended.ended(user: first, session: later, now: start + .seconds(2)))
        #expect(ended.ended(user: first, session: nil, now: start + .seconds(2)) && !ended.ended(user: first, session: UUID(), now: start + .seconds(2)))
        ended.record(LiveEnding(sessionIDs: [], everyStream: true, sessionless: true), of: second, now: start + .seconds(3))
        ended.record(LiveEnding(sessionIDs: [session], everyStream: false, sessionless: false), of: third, now: start + .seconds(4))
        #expect(!ended.ended(user: third, session: session, now: start + .seconds(5)), "a third user kept past the capacity")
        #expect(ended.ended(user: first, session: session, now: start + .seconds(5)) && ended.ended(user: second, session: UUID(), now: start + .seconds(5)))
        // A generation on, what was heard is still kept (a token of it may live); an ending heard
        // now merges with it, and the capacity counts the new generation only.
        let next = start + EndedSessions.generation
        ended.record(LiveEnding(sessionIDs: [session], everyStream: false, sessionless: false), of: third, now: next)
        #expect(ended.ended(user: first, session: later, now: next) && ended.ended(user: third, session: session, now: next))
        ended.record(LiveEnding(sessionIDs: [UUID()], everyStream: false, sessionless: false), of: first, now: next + .seconds(1))
        // Two generations on, only what was heard in the last one is kept.
        let after = next + EndedSessions.generation
        #expect(ended.ended(user: first, session: later, now: after) && ended.ended(user: third, session: session, now: after))
        #expect(!ended.ended(user: second, session: UUID(), now: after))
        #expect(!ended.ended(user: first, session: later, now: after + EndedSessions.generation * 2))
        // Only a message that names an ending type is parsed for one.
        #expect(LiveHub.mayEnd(Array(#"1-0 {"type":"user.sessions_ended"}"#.utf8)) && LiveHub.mayEnd(Array(#"1-0 {"type":"user.deleted"}"#.utf8)))
        #expect(!LiveHub.mayEnd(Array(#"1-0 {"type":"notification.created"}"#.utf8)))
    }

    /// Ending a session ends the streams its tokens opened, and no other; a new one is refused.
    @Test func anEndedSessionEndsItsStreamsOnly() async throws {
        try await Self.withLiveGateway { gateway in
            let phone = try await gateway.person()
            let laptop = try await gateway.issuer.token(userID: phone.id, sessionID: UUID())
            let onPhone = try await gateway.open(phone)
            let onLaptop = try await SSEStream.open(port: gateway.port, token: laptop)
            defer { onPhone.close(); onLaptop.close() }

            try await gateway.publish(SessionsEnded(userID: phone.id, sessionIDs: [phone.session], all: false), to: phone.id)
            try await onPhone.waitUntilEnded()
            // Not an event the client sees.
            #expect(onPhone.events.isEmpty)
            let (id, _) = try await gateway.notify(phone.id)
            #expect(try await onLaptop.events(count: 1).first?.id == id.description)
            #expect(!onLaptop.ended)

            let again = try await SSEStream.open(port: gateway.port, token: try await gateway.token(for: phone))
            #expect(again.status == 401 && again.problem["code"] as? String == "session_revoked")
        }
    }

    /// An ending in a user's live stream that is about another user, by its envelope or by its
    /// payload (no producer puts one there; the rule does not rest on that), ends none of their
    /// streams: not at the opening, which reads the live stream for endings, nor on a resumption
    /// that replays it.
    @Test func anotherUsersEndingInAUsersLiveStreamEndsNothing() async throws {
        try await Self.withLiveGateway { gateway in
            let person = try await gateway.person()
            let (before, _) = try await gateway.notify(person.id)
            let stranger = UUID()
            try await gateway.publish(UserDeleted(userID: stranger), to: person.id, eventUser: stranger)
            try await gateway.publish(SessionsEnded(userID: stranger, sessionIDs: [person.session], all: true), to: person.id, eventUser: stranger)
            // An envelope of the user's whose payload is about someone else.
            try await gateway.publish(UserDeleted(userID: stranger), to: person.id)
            let (after, _) = try await gateway.notify(person.id)
            let fresh = try await gateway.open(person)
            let resumed = try await gateway.open(person, lastEventID: before.description)
            defer { fresh.close(); resumed.close() }
            #expect(fresh.status == 200 && resumed.status == 200)
            #expect(try await resumed.events(count: 1).first?.id == after.description)
            #expect(!fresh.ended && !resumed.ended)
        }
    }

    @Test func aDeletedAccountsStreamsEnd() async throws {
        try await Self.withLiveGateway { gateway in
            let person = try await gateway.person()
            let first = try await gateway.open(person)
            let second = try await gateway.open(person)
            defer { first.close(); second.close() }
            try await gateway.publish(UserDeleted(userID: person.id), to: person.id)
            try await first.waitUntilEnded()
            try await second.waitUntilEnded()
            let again = try await gateway.open(person)
            #expect(again.status == 401 && again.problem["code"] as? String == "session_revoked")
        }
    }

    /// At most `maxPerUser` streams a user: one more takes the place of the one open longest (a
    /// client that vanished without closing goes on beating for minutes), which ends, here at once
    /// (both are in this process), told it was replaced.
    @Test func aUserHasAtMostMaxPerUserStreams() async throws {
        try await Self.withLiveGateway(heartbeat: .seconds(2), maxPerUser: 2) { gateway in
            let person = try await gateway.person()
            let first = try await gateway.open(person)
            let second = try await gateway.open(person)
            defer { first.close(); second.close() }
            let key = RedisArgument(StreamSlots.key(for: person.id))
            let before = try await gateway.redis.send("ZRANGE", key, "0", "-1").array?.compactMap(\.string) ?? []
            #expect(before.count == 2)
            let third = try await gateway.open(person)
            defer { third.close() }
            #expect(third.status == 200)
            try await first.waitUntilEnded()
            // Told so, last, without an id: its client waits until it is next in use to connect again.
            #expect(first.events.last == SSEMessage(event: "replaced", data: "{}"), "\(first.events)")
            try await Task.sleep(for: .seconds(3))
            #expect(!second.ended && !third.ended, "the newer streams go on")
            let after = try await gateway.redis.send("ZRANGE", key, "0", "-1").array?.compactMap(\.string) ?? []
            #expect(after.count == 2 && after.contains(before.max()!) && !after.contains(before.min()!), "\(before) then \(after)")
            // A token of an ended session takes no one's place.
            let endedSession = UUID()
            let ended = try await gateway.issuer.token(userID: person.id, sessionID: endedSession)
            try await gateway.publish(SessionsEnded(userID: person.id, sessionIDs: [endedSession], all: false), to: person.id)
            let refused = try await SSEStream.open(port: gateway.port, token: ended)
            #expect(refused.status == 401 && refused.problem["code"] as? String == "session_revoked")
            // As sets: ZRANGE orders by the last heartbeat, which the two streams take turns at.
            #expect(Set(try await gateway.redis.send("ZRANGE", key, "0", "-1").array?.compactMap(\.string) ?? []) == Set(after))
            // Someone else is not counted with them.
            let other = try await gateway.open(try await gateway.person())
            defer { other.close() }
            #expect(other.status == 200)
            try await Task.sleep(for: .seconds(1.5))
            #expect(!second.ended && !third.ended && !other.ended)
            // A stream that ends gives its slot back at once.
            third.close()
            try await waitUntil(.seconds(10)) { try await gateway.redis.send("ZCARD", key).int == 1 }
        }
    }

    /// Streams opened faster than heartbeats come: the process holds at most `maxPerUser` of the
    /// account's, the older ones told at once that they were replaced, not at their next beat; so
    /// one account cannot fill the process's streams.
    @Test func aProcessHoldsAtMostMaxPerUserStreamsOfAnAccountAtOnce() async throws {
        try await Self.withLiveGateway(heartbeat: .seconds(60), maxPerUser: 2) { gateway in
            let person = try await gateway.person()
            var streams: [SSEStream] = []
            for _ in 0..<6 { streams.append(try await gateway.open(person)) }
            defer { for stream in streams { stream.close() } }
            #expect(streams.allSatisfy { $0.status == 200 })
            for stream in streams.prefix(4) {
                try await stream.waitUntilEnded(within: .seconds(10))
                #expect(stream.events.last == SSEMessage(event: "replaced", data: "{}"), "\(stream.events)")
            }
            try await Task.sleep(for: .milliseconds(300))
            #expect(!streams[4].ended && !streams[5].ended, "the newest two go on")
            // The newest still hear the account's events.
            let sent = try await gateway.notify(person.id).notification
            for stream in streams.suffix(2) {
                let received = try await stream.events(count: 1, within: .seconds(10))
                #expect(received.first?.json["notification_id"] as? String == sent.uuidString.lowercased())
            }
        }
    }

    /// Only streams whose session was checked and whose slot was taken count against the account's
    /// limit: one still being checked (perhaps of an ended session, to be refused) ends no other.
    @Test func aStreamStillBeingCheckedReplacesNone() async throws {
        let hub = LiveHub(subscriber: RedisSubscriber(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger), logger: TestEnvironment.logger)
        let user = UUID()
        let first = hub.register(user: user, session: UUID())
        let second = hub.register(user: user, session: UUID())
        let unchecked = hub.register(user: user, session: UUID())
        hub.makeRoom(for: first, limit: 1)
        hub.makeRoom(for: second, limit: 1)
        for registration in [first, second, unchecked] { hub.unregister(registration) }
        func told(_ registration: LiveHub.Registration) async -> [String] {
            var told: [String] = []
            for await signal in registration.signals { told.append(signal.isReplaced ? "replaced" : "other") }
            return told
        }
        // The first of the two checked streams, past a limit of one, is replaced; the second is told
        // nothing, though the unchecked one is newer than the first.
        #expect(await told(first) == ["replaced"])
        #expect(await told(second) == [])
        #expect(await told(unchecked) == [])
    }

    @Test func aProcessHoldsAtMostMaxConnectionsStreams() async throws {
        try await Self.withLiveGateway(maxConnections: 1) { gateway in
            let first = try await gateway.open(try await gateway.person())
            defer { first.close() }
            let second = try await gateway.open(try await gateway.person())
            #expect(second.status == 503 && second.problem["code"] as? String == "too_many_connections")
        }
    }

    /// Twenty users, fifty events each, all published at once: each stream gets its own fifty, in
    /// order, and nobody else's.
    @Test func everyStreamGetsItsOwnEventsOnly() async throws {
        try await Self.withLiveGateway { gateway in
            var people: [LiveGateway.Person] = []
            for _ in 0..<20 { people.append(try await gateway.person()) }
            var streams: [SSEStream] = []
            for person in people { streams.append(try await gateway.open(person)) }
            defer { for stream in streams { stream.close() } }
            let sent = try await withThrowingTaskGroup(of: (Int, [UUID]).self) { group in
                for (index, person) in people.enumerated() {
                    group.addTask {
                        var ids: [UUID] = []
                        for _ in 0..<50 { ids.append(try await gateway.notify(person.id).notification) }
                        return (index, ids)
                    }
                }
                var sent: [Int: [UUID]] = [:]
                for try await (index, ids) in group { sent[index] = ids }
                return sent
            }
            for (index, stream) in streams.enumerated() {
                let received = try await stream.events(count: 50, within: .seconds(60))
                let ids = received.compactMap { ($0.json["notification_id"] as? String).flatMap { UUID(uuidString: $0) } }
                #expect(ids == sent[index], "stream \(index)")
                #expect(received.allSatisfy { $0.json["user_id"] as? String == people[index].id.uuidString.lowercased() })
            }
            try await Task.sleep(for: .milliseconds(500))
            #expect(streams.map(\.events.count) == Array(repeating: 50, count: 20))
        }
    }

    /// A stream whose slot is gone (Redis lost it, or was away past its lapse) takes it again at
    /// its next beat while the user has room; one whose slot another stream took, leaving no room,
    /// ends instead of taking it back past the user's limit.
    @Test func aStreamWhoseSlotWasTakenEnds() async throws {
        try await Self.withLiveGateway(heartbeat: .seconds(1), maxPerUser: 1) { gateway in
            let person = try await gateway.person()
            let stream = try await gateway.open(person)
            defer { stream.close() }
            let key = RedisArgument(StreamSlots.key(for: person.id))
            let held = try #require(try await gateway.redis.send("ZRANGE", key, "0", "-1").array?.first?.string)
            _ = try await gateway.redis.send("DEL", key)
            try await waitUntil(.seconds(10)) { try await gateway.redis.send("ZRANGE", key, "0", "-1").array?.compactMap(\.string) == [held] }
            #expect(!stream.ended)
            // As a claim does with a lapsed slot: removed, and another stream's in its place.
            _ = try await gateway.redis.send("ZREM", key, RedisArgument(held))
            _ = try await gateway.redis.send("ZADD", key, RedisArgument(String(Int(Date().timeIntervalSince1970 * 1000))), "another-stream")
            try await stream.waitUntilEnded()
            #expect(stream.events.map(\.event) == ["replaced"])
            let slots = try await gateway.redis.send("ZRANGE", key, "0", "-1").array?.compactMap(\.string)
            #expect(slots == ["another-stream"])
        }
    }

    @Test func heartbeatsKeepTheStreamAlive() async throws {
        try await Self.withLiveGateway(heartbeat: .seconds(1)) { gateway in
            let person = try await gateway.person()
            let stream = try await gateway.open(person)
            defer { stream.close() }
            try await waitUntil(.seconds(5)) { stream.messages.contains { $0.comment == "ping" } }
            // The stream's slot is kept fresh with each beat.
            let open = try await gateway.redis.send("ZCARD", RedisArgument(StreamSlots.key(for: person.id))).int
            #expect(open == 1)
        }
    }

    /// The client timeout times what the gateway waits for from a client; a stream is the gateway
    /// writing, and outlives it.
    @Test func aStreamOutlivesTheClientTimeout() async throws {
        try await Self.withLiveGateway(clientTimeout: .milliseconds(300)) { gateway in
            let person = try await gateway.person()
            let stream = try await gateway.open(person)
            defer { stream.close() }
            try await Task.sleep(for: .milliseconds(1_200))
            let (id, _) = try await gateway.notify(person.id)
            #expect(try await stream.events(count: 1).first?.id == id.description)
            #expect(!stream.ended)
        }
    }

    /// A client that stops reading while its events keep coming is cut once its side has stayed full
    /// for the client timeout: its stream ends and gives its place back, although the gateway's write
    /// to it never completes (so that neither its token's expiry nor anything else could end it).
    @Test func aStreamWhoseClientStopsReadingIsCut() async throws {
        // A Redis of its own: every gateway of the other tests would hear these 20 MB on the shared one.
        let server = try RedisServer()
        try await server.start()
        try await Self.withLiveGateway(maxConnections: 1, clientTimeout: .milliseconds(500), redis: server.configuration) { gateway in
            let person = try await gateway.person()
            let stalled = try await StalledClient.open(port: gateway.port, token: person.token)
            defer { stalled.close() }
            #expect(stalled.head.hasPrefix("HTTP/1.1 200"), "\(stalled.head)")
            let crowded = try await gateway.open(try await gateway.person())
            #expect(crowded.status == 503)
            // 20 MB of events, far more than the sockets' buffers hold (4 MB at most on the gateway's
            // side here, a few KiB on the client's).
            let bulky = String(repeating: "x", count: 100_000)
            for _ in 0..<200 {
                try await gateway.publish(NotificationCreated(notificationID: UUID(), userID: person.id, kind: .unknown(bulky), actorID: nil), to: person.id)
            }
            try await waitUntil(.seconds(30)) {
                let next = try await gateway.open(try await gateway.person())
                defer { next.close() }
                return next.status == 200
            }
            // Its slot among the user's streams is given back too (just after its place in the process).
            try await waitUntil(.seconds(10)) { try await gateway.redis.send("ZCARD", RedisArgument(StreamSlots.key(for: person.id))).int == 0 }
        }
        try await server.stop()
    }

    /// Redis restarts under an open stream: what the subscription could not hear meanwhile is read
    /// from the user's live stream once the gateway has subscribed again, and the stream goes on.
    @Test func anOpenStreamGetsWhatItMissedWhileRedisWasAway() async throws {
        let server = try RedisServer()
        try await server.start()
        try await Self.withLiveGateway(redis: server.configuration) { gateway in
            let person = try await gateway.person()
            let stream = try await gateway.open(person)
            defer { stream.close() }
            let (first, _) = try await gateway.notify(person.id)
            #expect(try await stream.events(count: 1).map(\.id) == [first.description])
            // An entry the subscription never hears of (added without the relay's PUBLISH), as one
            // published while it was down would be; kept across the restart (the server's AOF).
            let missed = UUID()
            let envelope = try EventEnvelope(NotificationCreated(notificationID: missed, userID: person.id, kind: .follow, actorID: UUID()), producer: "test", userID: person.id)
            let added = try await gateway.redis.xadd(
                LiveStream.key(for: person.id), maxLength: nil, fields: [("type", envelope.type), ("prev", first.description), ("envelope", envelope.json)])
            try await Task.sleep(for: .milliseconds(500))
            #expect(stream.events.count == 1)

            try await server.stop()
            try await server.start()
            let received = try await stream.events(count: 2, within: .seconds(30))
            #expect(received.last?.id == added)
            #expect(received.last?.json["notification_id"] as? String == missed.uuidString.lowercased())
            // And the subscription carries new events again.
            let (next, _) = try await gateway.notify(person.id)
            #expect(try await stream.events(count: 3, within: .seconds(30)).last?.id == next.description)
            #expect(!stream.ended)
        }
        try await server.stop()
    }

    /// Redis restarts without its data under an open stream: what was published meanwhile (and
    /// not heard) is gone with the user's live stream, so the client is told to reset, not left
    /// believing it missed nothing.
    @Test func anOpenStreamWhoseBacklogRedisLostIsToldToReset() async throws {
        let server = try RedisServer(extraArguments: ["--appendonly", "no"])
        try await server.start()
        try await Self.withLiveGateway(heartbeat: .seconds(1), redis: server.configuration) { gateway in
            let person = try await gateway.person()
            let stream = try await gateway.open(person)
            defer { stream.close() }
            let (first, _) = try await gateway.notify(person.id)
            #expect(try await stream.events(count: 1).map(\.id) == [first.description])
            try await server.stop()
            try await server.start()
            let received = try await stream.events(count: 2, within: .seconds(30))
            #expect(received.last?.event == "reset", "\(received.map { $0.event ?? "" })")
            // And the subscription carries new events again.
            let (next, _) = try await gateway.notify(person.id)
            #expect(try await stream.events(count: 3, within: .seconds(30)).last?.id == next.description)
            // Its slot, lost with the rest, is taken again at the next beats: the stream goes on.
            try await Task.sleep(for: .seconds(3))
            #expect(!stream.ended)
        }
        try await server.stop()
    }

    /// A graceful shutdown does not wait for open streams: they end, and the gateway stops.
    @Test func aShutdownEndsOpenStreams() async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        let port = try RedisServer.freePort()
        var config = GatewayTests.config(everyServiceAt: "http://127.0.0.1:\(try RedisServer.freePort())", port: port, timeout: .seconds(5))
        config.redis = try TestEnvironment.redis()
        config.tokens = issuer.tokenConfig
        let group = ServiceGroup(services: [try buildApplication(config)], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await waitUntil(.seconds(20)) { await RedisServer.accepts(port: port) }
            let stream = try await SSEStream.open(port: port, token: try await issuer.token())
            defer { stream.close() }
            #expect(stream.status == 200)
            let started = ContinuousClock.now
            await group.triggerGracefulShutdown()
            try await stream.waitUntilEnded(within: .seconds(10))
            try await tasks.waitForAll()
            #expect(ContinuousClock.now - started < .seconds(10))
        }
    }
}

extension LiveHub.Signal {
    var isReplaced: Bool {
        if case .replaced = self { return true }
        return false
    }
}
