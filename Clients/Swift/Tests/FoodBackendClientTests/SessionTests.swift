import FoodBackendAPI
import Foundation
import Testing

@testable import FoodBackendClient

/// The session's refresh against a local server: one refresh for every request that found the token
/// expired, and a refused refresh signs the user out once.
@Suite(.timeLimit(.minutes(1))) struct SessionTests {
    static let unread = TestServer.Reply.json(#"{"unread":3}"#)

    @Test func twentyRequestsWithAnExpiredTokenShareOneRefreshAndAllSucceed() async throws {
        let seen = Seen()
        let old = testToken("old")
        let new = testToken("new")
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                let body = try? JSONSerialization.jsonObject(with: request.body) as? [String: String]
                seen.add("refresh", body?["refresh_token"] ?? "none")
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

    @Test func theSessionStreamFollowsSignInAndSignOut() async throws {
        let token = testToken("signed-in", roles: ["user", "coach"])
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/login":
                return .json(
                    #"{"user":{"id":"0d6f3b52-8a4c-4b8e-9d3e-3a1f6c2b7e10","email":"a@example.com","email_verified":true,"roles":["user"],"providers":[],"has_password":true,"disabled":false,"created_at":"2026-11-28T10:00:00Z"},"session":{"access_token":"\#(token)","refresh_token":"r","expires_in":900,"token_type":"Bearer","session_id":"7c1d2a52-1111-4b8e-9d3e-3a1f6c2b7e10"}}"#
                )
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
}
