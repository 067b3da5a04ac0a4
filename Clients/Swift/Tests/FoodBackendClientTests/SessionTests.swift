import FoodBackendAPI
import Foundation
import Testing

@testable import FoodBackendClient

/// The session's refresh against a local server: one refresh for every request that found the token
/// expired, and a refused refresh signs the user out once.
@Suite(.timeLimit(.minutes(1))) struct SessionTests {
    static let unread = TestServer.Reply.json(#"{"unread":3}"#)

    static func session(_ accessToken: String, _ refreshToken: String) -> String {
        #"{"access_token":"\#(accessToken)","refresh_token":"\#(refreshToken)","expires_in":900,"token_type":"Bearer","session_id":"7c1d2a52-1111-4b8e-9d3e-3a1f6c2b7e10"}"#
    }

    /// The refresh token a refresh request sent.
    static func sentRefreshToken(_ request: TestServer.Request) -> String {
        ((try? JSONSerialization.jsonObject(with: request.body)) as? [String: String])?["refresh_token"] ?? "none"
    }

    static func signIn(_ accessToken: String, _ refreshToken: String) -> String {
        #"{"user":{"id":"0d6f3b52-8a4c-4b8e-9d3e-3a1f6c2b7e10","email":"a@example.com","email_verified":true,"roles":["user"],"providers":[],"has_password":true,"disabled":false,"created_at":"2026-11-28T10:00:00Z"},"session":\#(session(accessToken, refreshToken))}"#
    }

    @Test func twentyRequestsWithAnExpiredTokenShareOneRefreshAndAllSucceed() async throws {
        let seen = Seen()
        let old = testToken("old")
        let new = testToken("new")
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                seen.add("refresh", Self.sentRefreshToken(request))
                // Slow enough that every request has hit its 401 before the refresh answers.
                try? await Task.sleep(for: .milliseconds(300))
                return .json(#"{"access_token":"\#(new)","refresh_token":"refresh-2","expires_in":900,"token_type":"Bearer","session_id":"7c1d2a52-1111-4b8e-9d3e-3a1f6c2b7e10"}"#)
            case "/v1/notifications/unread-count":
                seen.add("token", request.bearer ?? "none")
                return request.bearer == new ? Self.unread : .problem(.unauthorized, "token_expired")
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let store = InMemoryTokenStore(StoredTokens(accessToken: old, refreshToken: "refresh-1"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        let counts = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<20 {
                group.addTask { try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread } }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(counts == Array(repeating: 3, count: 20))
        #expect(seen.all("refresh") == ["refresh-1"])
        #expect(seen.all("token").filter { $0 == old }.count == 20)
        #expect(seen.all("token").filter { $0 == new }.count == 20)
        #expect(await store.load() == StoredTokens(accessToken: new, refreshToken: "refresh-2"))
        try await server.shutdown()
    }

    /// A refresh whose answer was lost is sent again at once with the same token, which the server
    /// answers within its grace: the session goes on, instead of the token's next use, minutes
    /// later, being `refresh_token_reused` and the user signed out.
    @Test func aRefreshWhoseAnswerWasLostIsSentAgainAtOnce() async throws {
        let seen = Seen()
        let new = testToken("new")
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                seen.add("refresh", Self.sentRefreshToken(request))
                return seen.count("refresh") == 1 ? .drop : .json(Self.session(new, "refresh-2"))
            case "/v1/notifications/unread-count":
                return request.bearer == new ? Self.unread : .problem(.unauthorized, "token_expired")
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let store = InMemoryTokenStore(StoredTokens(accessToken: testToken("old"), refreshToken: "refresh-1"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store, configuration: .init(retry: RetryPolicy(attempts: 3, delay: .milliseconds(10))))
        #expect(try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread } == 3)
        #expect(seen.all("refresh") == ["refresh-1", "refresh-1"])
        #expect(await store.load() == StoredTokens(accessToken: new, refreshToken: "refresh-2"))
        try await server.shutdown()
    }

    /// `session_revoked` (signed out everywhere, a password changed on another device) signs the app
    /// out; one answering a request of a session that a new sign-in replaced meanwhile signs nobody out.
    @Test func aRevokedSessionSignsOutUnlessAnotherSignInReplacedIt() async throws {
        let revoked = testToken("revoked")
        let old = testToken("old")
        let new = testToken("new")
        // The old session's request arrives, and is answered only once the new sign-in is done.
        let staleArrived = Gate()
        let answerStale = Gate()
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/login":
                return .json(Self.signIn(new, "refresh-2"))
            case "/v1/notifications/unread-count":
                if request.bearer == new { return Self.unread }
                if request.bearer == old {
                    staleArrived.open()
                    await answerStale.wait()
                }
                return .problem(.unauthorized, "session_revoked")
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let store = InMemoryTokenStore(StoredTokens(accessToken: revoked, refreshToken: "refresh-1"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        await #expect(throws: FoodBackendError.self) { try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread } }
        #expect(await backend.currentSession == nil)
        #expect(await store.load() == nil)

        try await store.save(StoredTokens(accessToken: old, refreshToken: "refresh-1"))
        let other = FoodBackend(baseURL: server.url, tokenStore: store)
        let stale = Task { try await other.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread } }
        await staleArrived.wait()
        _ = try await other.signIn(email: "a@example.com", password: "a long password")
        answerStale.open()
        await #expect(throws: FoodBackendError.self) { try await stale.value }
        #expect(await other.currentSession?.sessionID == "new", "the new sign-in stays")
        #expect(try await other.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread } == 3)
        try await server.shutdown()
    }

    /// A store whose save is slow and whose clear is quick, as a Keychain's calls can be: a sign-out
    /// during a sign-in's save still leaves the store empty, its writes landing in the order made.
    @Test func theStoresWritesLandInTheOrderTheSessionChanged() async throws {
        actor SlowSaves: TokenStore {
            var tokens: StoredTokens?
            var saving = false
            func load() -> StoredTokens? { tokens }
            func save(_ new: StoredTokens) async throws {
                saving = true
                try await Task.sleep(for: .milliseconds(300))
                tokens = new
            }
            func clear() { tokens = nil }
        }
        let server = try await TestServer { request in
            request.path == "/v1/auth/login" ? .json(Self.signIn(testToken("a"), "refresh-1")) : .problem(.notFound, "not_found")
        }
        let store = SlowSaves()
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        let signIn = Task { try await backend.signIn(email: "a@example.com", password: "a long password") }
        while await !store.saving { try await Task.sleep(for: .milliseconds(5)) }
        await backend.forgetSession()
        _ = try await signIn.value
        #expect(await backend.currentSession == nil)
        #expect(await store.load() == nil, "the sign-out's clear lands after the sign-in's save")
        try await server.shutdown()
    }

    @Test func aRefusedRefreshSignsOutOnceAndIsNotTriedAgain() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                seen.add("refresh")
                try? await Task.sleep(for: .milliseconds(200))
                return .problem(.unauthorized, "refresh_token_reused")
            case "/v1/notifications/unread-count":
                seen.add("token", request.bearer ?? "none")
                return request.bearer == nil ? .problem(.unauthorized, "unauthorized") : .problem(.unauthorized, "token_expired")
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let store = InMemoryTokenStore(StoredTokens(accessToken: testToken("old"), refreshToken: "refresh-1"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        let sessions = await backend.sessions
        let watcher = Task {
            var states: [Bool] = []
            for await session in sessions {
                states.append(session != nil)
                if states.count == 2 { break }
            }
            return states
        }
        let errors = await withTaskGroup(of: FoodBackendError?.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    do {
                        _ = try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json }
                        return nil
                    } catch {
                        return error as? FoodBackendError
                    }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(errors.count == 20)
        // Every caller learns the session ended; none gets a result.
        for error in errors {
            #expect(error?.code == .refreshTokenReused || error?.code == .notSignedIn, "\(String(describing: error))")
        }
        #expect(seen.count("refresh") == 1)
        #expect(await watcher.value == [true, false])
        #expect(await store.load() == nil)
        #expect(await backend.currentSession == nil)
        // Signed out: the next call goes without a token and is not refreshed.
        await #expect(throws: FoodBackendError.self) { try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json } }
        #expect(seen.count("refresh") == 1)
        #expect(seen.all("token").last == "none")
        try await server.shutdown()
    }

    /// A refresh refused by something other than auth (a captive portal's or a firewall's page, a
    /// proxy's `403`) says nothing of the session: it stays, and the next request refreshes again.
    @Test func aRefreshRefusedWithoutAuthsWordKeepsTheSession() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                seen.add("refresh")
                return seen.count("refresh") == 1
                    ? .full(.forbidden, [("Content-Type", "text/html")], Data("<html>Blocked</html>".utf8)) : .json(Self.session(testToken("new"), "refresh-2"))
            default:
                return request.bearer == testToken("new") ? Self.unread : .problem(.unauthorized, "token_expired")
            }
        }
        let store = InMemoryTokenStore(StoredTokens(accessToken: testToken("old"), refreshToken: "refresh-1"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        await #expect(throws: FoodBackendError.self) { _ = try await backend.send { try await $0.getV1NotificationsUnreadCount().ok } }
        #expect(await backend.currentSession != nil)
        #expect(await store.load()?.refreshToken == "refresh-1")
        let unread = try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json }
        #expect(unread.unread == 3 && seen.count("refresh") == 2)
        try await server.shutdown()
    }

    /// Signing out forgets the session here before the server is told, and does not wait long for a
    /// server that does not answer, whether the token was good or had to be exchanged first: an app
    /// closed right after the tap must not find the session again at its next launch.
    @Test func aSignOutIsNotHeldByAServerThatDoesNotAnswer() async throws {
        let never = Gate()
        let seen = Seen()
        let store = InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "refresh-1"))
        let server = try await TestServer { request in
            // Forgotten here before anything reaches the server.
            if await store.load() != nil { seen.add("still stored", request.path) }
            if request.path == "/v1/auth/logout" && request.bearer == testToken("a") { return .problem(.unauthorized, "token_expired") }
            await never.wait()
            return .problem(.notFound, "not_found")
        }
        for token in [testToken("good"), testToken("a")] {
            await store.save(StoredTokens(accessToken: token, refreshToken: "refresh-1"))
            let backend = FoodBackend(baseURL: server.url, tokenStore: store)
            let asked = ContinuousClock.now
            await backend.signOut()
            #expect(ContinuousClock.now - asked < .seconds(30))
            #expect(await store.load() == nil)
            #expect(await backend.currentSession == nil)
        }
        #expect(seen.all("still stored").isEmpty, "\(seen.all("still stored"))")
        never.open()
        try await server.shutdown()
    }

    /// A sign-out with an expired access token exchanges the session's refresh token for a new one,
    /// and ends the session on the server with it.
    @Test func aSignOutWithAnExpiredTokenStillEndsTheSessionOnTheServer() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                seen.add("refresh", Self.sentRefreshToken(request))
                return .json(Self.session(testToken("new"), "refresh-2"))
            case "/v1/auth/logout":
                seen.add("logout", request.bearer ?? "none")
                return request.bearer == testToken("new") ? .full(.noContent, [], Data()) : .problem(.unauthorized, "token_expired")
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let store = InMemoryTokenStore(StoredTokens(accessToken: testToken("old"), refreshToken: "refresh-1"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        await backend.signOut(everywhere: true)
        #expect(seen.all("refresh") == ["refresh-1"])
        #expect(seen.all("logout") == [testToken("old"), testToken("new")])
        #expect(await store.load() == nil)
        #expect(await backend.currentSession == nil)
        try await server.shutdown()
    }

    @Test func theSessionStreamFollowsSignInAndSignOut() async throws {
        let token = testToken("signed-in", roles: ["user", "coach"])
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/login":
                return .json(Self.signIn(token, "r"))
            case "/v1/auth/logout":
                return request.bearer == token ? .full(.noContent, [], Data()) : .problem(.unauthorized, "unauthorized")
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore())
        let sessions = await backend.sessions
        var iterator = sessions.makeAsyncIterator()
        #expect(await iterator.next() == .some(nil))
        let signIn = try await backend.signIn(email: "a@example.com", password: "a password")
        #expect(signIn.user.emailVerified)
        let session = await iterator.next()
        #expect(session??.roles == ["user", "coach"])
        #expect(session??.sessionID == "signed-in")
        await backend.signOut()
        #expect(await iterator.next() == .some(nil))
        try await server.shutdown()
    }

    /// A server whose refresh answers late, so that the app signs out or in while it runs.
    static func slowRefreshServer(_ seen: Seen, refreshed: String, signedIn: String, answerRefresh: Gate) async throws -> TestServer {
        try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                seen.add("refresh")
                await answerRefresh.wait()
                return .json(Self.session(refreshed, "refresh-2"))
            case "/v1/auth/login":
                return .json(Self.signIn(signedIn, "refresh-b"))
            case "/v1/auth/logout":
                return .full(.noContent, [], Data())
            case "/v1/notifications/unread-count":
                return request.bearer == refreshed || request.bearer == signedIn ? Self.unread : .problem(.unauthorized, "token_expired")
            default:
                return .problem(.notFound, "not_found")
            }
        }
    }

    @Test func aRefreshThatEndsAfterASignOutIsDropped() async throws {
        let seen = Seen()
        let answerRefresh = Gate()
        let server = try await Self.slowRefreshServer(seen, refreshed: testToken("refreshed"), signedIn: testToken("b"), answerRefresh: answerRefresh)
        let store = InMemoryTokenStore(StoredTokens(accessToken: testToken("old"), refreshToken: "refresh-1"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        let call = Task { try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread } }
        while seen.count("refresh") == 0 { try await Task.sleep(for: .milliseconds(10)) }
        await backend.signOut()
        answerRefresh.open()
        do {
            _ = try await call.value
            Issue.record("the call went on after the sign-out")
        } catch let error as FoodBackendError {
            #expect(error.code == .notSignedIn)
        }
        #expect(await backend.currentSession == nil)
        #expect(await store.load() == nil)
        try await server.shutdown()
    }

    @Test func aRefreshThatEndsAfterANewSignInIsDropped() async throws {
        let seen = Seen()
        let signedIn = testToken("b")
        let answerRefresh = Gate()
        let server = try await Self.slowRefreshServer(seen, refreshed: testToken("refreshed"), signedIn: signedIn, answerRefresh: answerRefresh)
        let store = InMemoryTokenStore(StoredTokens(accessToken: testToken("old"), refreshToken: "refresh-1"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        let call = Task { try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread } }
        while seen.count("refresh") == 0 { try await Task.sleep(for: .milliseconds(10)) }
        try await backend.signIn(email: "b@example.com", password: "a password")
        answerRefresh.open()
        // The call was the old session's: it gets its own answer, not the new session's token.
        do {
            _ = try await call.value
            Issue.record("the call went on in another session")
        } catch let error as FoodBackendError {
            #expect(error.code == .tokenExpired)
        }
        #expect(await backend.currentSession?.sessionID == "b")
        #expect(await store.load() == StoredTokens(accessToken: signedIn, refreshToken: "refresh-b"))
        try await server.shutdown()
    }

    /// A request of one session is told its token expired after another session signed in: it is
    /// not sent again with the new session's token (a meal would be made in the other account).
    @Test func aRequestOfASessionThatEndedIsNotSentWithTheNextOnesToken() async throws {
        let seen = Seen()
        let old = testToken("old")
        let signedIn = testToken("b")
        let answerOld = Gate()
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/login":
                return .json(Self.signIn(signedIn, "refresh-b"))
            case "/v1/notifications/unread-count":
                seen.add("unread", request.bearer ?? "none")
                guard request.bearer == old else { return Self.unread }
                await answerOld.wait()
                return .problem(.unauthorized, "token_expired")
            default:
                seen.add("other", request.path)
                return .problem(.notFound, "not_found")
            }
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: old, refreshToken: "refresh-1")))
        let call = Task { try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread } }
        while seen.count("unread") == 0 { try await Task.sleep(for: .milliseconds(10)) }
        try await backend.signIn(email: "b@example.com", password: "a password")
        answerOld.open()
        do {
            _ = try await call.value
            Issue.record("the old session's call went on as the new session")
        } catch let error as FoodBackendError {
            #expect(error.code == .tokenExpired)
        }
        #expect(seen.all("unread") == [old])
        #expect(seen.all("other").isEmpty, "no refresh of either session")
        try await server.shutdown()
    }

    @Test func everyCallerAtLaunchWaitsForTheOneReadOfTheStore() async throws {
        let seen = Seen()
        let token = testToken("stored")
        let server = try await TestServer { request in
            seen.add("token", request.bearer ?? "none")
            return Self.unread
        }
        let store = SlowTokenStore(StoredTokens(accessToken: token, refreshToken: "r"))
        let backend = FoodBackend(baseURL: server.url, tokenStore: store)
        async let current = backend.currentSession
        async let unread = backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread }
        try await Task.sleep(for: .milliseconds(50))
        var sessions = await backend.sessions.makeAsyncIterator()
        #expect(await sessions.next()??.sessionID == "stored")
        #expect(await current?.sessionID == "stored")
        #expect(try await unread == 3)
        #expect(seen.all("token") == [token])
        #expect(await store.loads == 1)
        try await server.shutdown()
    }

    @Test func aStoreThatCouldNotBeReadIsReadAgainAndItsSessionPublished() async throws {
        let store = SlowTokenStore(StoredTokens(accessToken: testToken("stored"), refreshToken: "r"), failing: 1)
        let backend = FoodBackend(baseURL: URL(string: "http://127.0.0.1:9")!, tokenStore: store)
        var sessions = await backend.sessions.makeAsyncIterator()
        #expect(await sessions.next() == .some(nil))
        try #require(await backend.currentSession?.sessionID == "stored")
        #expect(await sessions.next()??.sessionID == "stored")
        #expect(await store.loads == 2)
    }
}

/// A store slow to answer at launch (a Keychain read), which cannot be read the first `failing` times
/// (a Keychain before the device's first unlock).
actor SlowTokenStore: TokenStore {
    struct Locked: Error {}

    private let tokens: StoredTokens
    private var failing: Int
    private(set) var loads = 0

    init(_ tokens: StoredTokens, failing: Int = 0) {
        self.tokens = tokens
        self.failing = failing
    }

    func load() async throws -> StoredTokens? {
        loads += 1
        try await Task.sleep(for: .milliseconds(200))
        guard failing == 0 else {
            failing -= 1
            throw Locked()
        }
        return tokens
    }

    func save(_ tokens: StoredTokens) {}
    func clear() {}
}
