import FoodBackendAPI
import Foundation
import HTTPTypes
import OpenAPIRuntime
import Testing

@testable import FoodBackendClient

@Suite(.timeLimit(.minutes(1))) struct ErrorsAndRetriesTests {
    @Test func problemsBecomeTypedErrors() async throws {
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/signup":
                return .problem(.conflict, "email_taken")
            case "/v1/usage/sources/acquire":
                return .problem(.forbidden, "limit_exceeded", extra: #","limit":50"#)
            case "/v1/spaces":
                return .problem(.forbidden, "requires_upgrade", extra: #","feature":"collaboration","required_tier":"team""#)
            case "/v1/auth/login":
                return .problem(
                    .badRequest, "validation_failed", extra: #","errors":[{"field":"email","message":"is required"}],"request_id":"req-1""#)
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore())
        do {
            try await backend.signUp(email: "taken@example.com", password: "a long password")
            Issue.record("no error")
        } catch let error as FoodBackendError {
            #expect(error.code == .emailTaken && error.status == 409 && error.detail == "email_taken happened")
        }
        do {
            _ = try await backend.send { try await $0.postV1UsageCounterAcquire(path: .init(counter: "sources"), body: .json(.init(amount: 1))).ok }
            Issue.record("no error")
        } catch let error as FoodBackendError {
            #expect(error.code == .limitExceeded && error.extensions["limit"] == "50")
        }
        do {
            _ = try await backend.send { try await $0.postV1Spaces(body: .json(.init(name: "Team"))).created }
            Issue.record("no error")
        } catch let error as FoodBackendError {
            switch error.code {
            case .requiresUpgrade(let tier): #expect(tier == "team" && error.extensions["feature"] == "collaboration")
            default: Issue.record("\(error)")
            }
        }
        do {
            try await backend.signIn(email: "", password: "x")
            Issue.record("no error")
        } catch let error as FoodBackendError {
            #expect(error.code == .validationFailed && error.requestID == "req-1")
            #expect(error.fieldErrors == [.init(field: "email", message: "is required")])
        }
        #expect(await backend.currentSession == nil)
        try await server.shutdown()
    }

    @Test func anIdempotencyKeyIsKeptAcrossTheClientsRetriesAndARefresh() async throws {
        let seen = Seen()
        let new = testToken("new")
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/auth/token/refresh":
                return .json(#"{"access_token":"\#(new)","refresh_token":"r2","expires_in":900,"token_type":"Bearer","session_id":"7c1d2a52-1111-4b8e-9d3e-3a1f6c2b7e10"}"#)
            case "/v1/events/ticket":
                let key = request.headers.first(name: "Idempotency-Key") ?? "none"
                seen.add("key", key)
                switch seen.count("key") {
                case 1: return .problem(.unauthorized, "token_expired")
                case 2: return .problem(.serviceUnavailable, "unavailable", headers: [("Retry-After", "0")])
                default: return .json(#"{"ticket":"t-1","expires_at":"2026-11-28T10:10:00.123Z"}"#)
                }
            default:
                return .problem(.notFound, "not_found")
            }
        }
        let backend = FoodBackend(
            baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("old"), refreshToken: "r1")),
            configuration: .init(retry: RetryPolicy(attempts: 3, delay: .milliseconds(10))))
        let ticket = try await backend.send { try await $0.postV1EventsTicket().ok.body.json.ticket }
        #expect(ticket == "t-1")
        let keys = seen.all("key")
        #expect(keys.count == 3 && Set(keys).count == 1 && keys[0] != "none")
        // A second call is another operation: another key.
        _ = try await backend.send { try await $0.postV1EventsTicket().ok.body.json.ticket }
        #expect(Set(seen.all("key")).count == 2)
        try await server.shutdown()
    }

    @Test func anErrorWithoutAnAnswerHoldsNoPasswordNorToken() async throws {
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/notifications/unread-count": return .problem(.unauthorized, "token_expired")
            // The sign-ins and the refresh get no answer.
            default: return .drop
            }
        }
        let secrets = ["password-9b8e1d", "apple-id-token-51c2", "refresh-token-7f3a9c"]
        let backend = FoodBackend(
            baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("old"), refreshToken: secrets[2])),
            configuration: .init(retry: RetryPolicy(attempts: 3, delay: .milliseconds(10))))
        var errors: [any Error] = []
        do {
            try await backend.signIn(email: "a@example.com", password: secrets[0])
        } catch {
            errors.append(error)
        }
        do {
            try await backend.signInWithApple(idToken: secrets[1], nonce: SignInNonce(raw: "n", expiresAt: Date()))
        } catch {
            errors.append(error)
        }
        // The refresh's failure comes out of another call.
        do {
            _ = try await backend.send { try await $0.getV1NotificationsUnreadCount().ok.body.json }
        } catch {
            errors.append(error)
        }
        #expect(errors.count == 3)
        for error in errors {
            #expect(!(error is ClientError) && !(error is FoodBackendError), "\(type(of: error))")
            for secret in secrets {
                #expect(!"\(error)".contains(secret) && !String(reflecting: error).contains(secret), "\(type(of: error)) holds \(secret)")
            }
        }
        try await server.shutdown()
    }

    @Test func aPOSTTheServerRunsWithoutItsKeyIsSentOnceAndWithoutOne() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            seen.add(request.path, request.headers.first(name: "Idempotency-Key") ?? "none")
            return .drop
        }
        let backend = FoodBackend(
            baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")),
            configuration: .init(retry: RetryPolicy(attempts: 3, delay: .milliseconds(10))))
        // The server ignores keys under /v1/auth/ and /v1/invitations/: a second attempt after a lost
        // answer would sign up twice (`email_taken`). An acceptance is answered again as it was to the
        // person who accepted, so it is sent again, still without a key.
        await #expect(throws: (any Error).self) { try await backend.signUp(email: "a@example.com", password: "a long password") }
        await #expect(throws: (any Error).self) {
            _ = try await backend.send { try await $0.postV1InvitationsCodeAccept(path: .init(code: "c0de")).ok }
        }
        #expect(seen.all("/v1/auth/signup") == ["none"])
        #expect(seen.all("/v1/invitations/c0de/accept") == ["none", "none", "none"])
        // A keyed POST is sent again with its key.
        await #expect(throws: (any Error).self) { _ = try await backend.send { try await $0.postV1EventsTicket().ok } }
        let keys = seen.all("/v1/events/ticket")
        #expect(keys.count == 3 && Set(keys).count == 1 && keys[0] != "none")
        try await server.shutdown()
    }

    /// A photo analysis's own 502 and 503 (the model worked on the photo, and the day's count was
    /// taken) are the caller's: sent again, each attempt would be another counted analysis. The
    /// gateway's 503 before it is sent again with the same key.
    @Test func anAnalysisTheModelWorkedOnIsNotSentAgain() async throws {
        let seen = Seen()
        let answers = ["upstream_unavailable", "analyzer_unavailable", "analysis_failed"]
        let server = try await TestServer { request in
            seen.add(request.path, request.headers.first(name: "Idempotency-Key") ?? "none")
            let code = answers[min(seen.count(request.path), answers.count) - 1]
            return .problem(code == "analysis_failed" ? .badGateway : .serviceUnavailable, code, headers: [("Retry-After", "0")])
        }
        let backend = FoodBackend(
            baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")),
            configuration: .init(retry: RetryPolicy(attempts: 3, delay: .milliseconds(10))))
        do {
            _ = try await backend.analyzeMeal(photo: Data([0xFF, 0xD8, 0xFF, 0xE0]))
            Issue.record("an analysis that failed answered")
        } catch let error as FoodBackendError {
            #expect(error.rawCode == "analyzer_unavailable" && error.status == 503, "\(error)")
        }
        let keys = seen.all("/v1/meals/analyze")
        #expect(keys.count == 2 && Set(keys).count == 1 && keys[0] != "none", "\(keys)")
        do {
            _ = try await backend.analyzeMeal(photo: Data([0xFF, 0xD8, 0xFF, 0xE0]))
            Issue.record("an analysis that failed answered")
        } catch let error as FoodBackendError {
            #expect(error.rawCode == "analysis_failed" && error.status == 502, "\(error)")
        }
        #expect(seen.all("/v1/meals/analyze").count == 3)
        try await server.shutdown()
    }

    /// The app's own key for an analysis it sends again (after the client gave up offline) goes as
    /// it is, so that the server answers it once.
    @Test func anAnalysisCarriesTheAppsKeyWhenGivenOne() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            seen.add(request.path, request.headers.first(name: "Idempotency-Key") ?? "none")
            return .problem(.unprocessableEntity, "no_food_found")
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")))
        for _ in 0..<2 {
            await #expect(throws: FoodBackendError.self) { _ = try await backend.analyzeMeal(photo: Data([0xFF, 0xD8, 0xFF]), idempotencyKey: "meal-photo-1") }
        }
        _ = try? await backend.analyzeMeal(photo: Data([0xFF, 0xD8, 0xFF]))
        let keys = seen.all("/v1/meals/analyze")
        #expect(keys.count == 3 && keys[0] == "meal-photo-1" && keys[1] == "meal-photo-1" && keys[2] != "meal-photo-1" && keys[2] != "none", "\(keys)")
        try await server.shutdown()
    }

    @Test func aKeyStillInUseIsSentAgainAfterRetryAfterWithinTheBudget() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            seen.add(request.path, request.headers.first(name: "Idempotency-Key") ?? "none")
            switch request.path {
            case "/v1/events/ticket" where seen.count(request.path) == 1:
                return .problem(.conflict, "idempotency_key_in_use", headers: [("Retry-After", "1")])
            case "/v1/events/ticket":
                return .json(#"{"ticket":"t-1","expires_at":"2026-11-28T10:10:00.123Z"}"#)
            case "/v1/spaces" where seen.count(request.path) == 1:
                return .problem(.conflict, "idempotency_key_in_use", headers: [("Retry-After", "600")])
            default:
                return .problem(.conflict, "already_exists")
            }
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")))
        let started = ContinuousClock.now
        let ticket = try await backend.send { try await $0.postV1EventsTicket().ok.body.json.ticket }
        #expect(ticket == "t-1" && ContinuousClock.now - started >= .seconds(1))
        let keys = seen.all("/v1/events/ticket")
        #expect(keys.count == 2 && Set(keys).count == 1)
        // A wait past the budget, and another conflict, are the caller's.
        do {
            _ = try await backend.send { try await $0.postV1Spaces(body: .json(.init(name: "Team"))).created }
            Issue.record("no error")
        } catch let error as FoodBackendError {
            #expect(error.code == .idempotencyKeyInUse && error.retryAfter == 600)
        }
        do {
            _ = try await backend.send { try await $0.postV1Spaces(body: .json(.init(name: "Team"))).created }
            Issue.record("no error")
        } catch let error as FoodBackendError {
            #expect(error.rawCode == "already_exists")
        }
        #expect(seen.count("/v1/spaces") == 2)
        try await server.shutdown()
    }

    @Test func anAvatarIsSentWithItsImagesContentType() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            seen.add("type", request.headers.first(name: "Content-Type") ?? "none")
            seen.add("size", String(request.body.count))
            return .problem(.unsupportedMediaType, "unsupported_image")
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")))
        let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 0, count: 100))
        let jpeg = Data([0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 0, count: 50))
        let webp = Data(Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WEBP".utf8) + [1, 2, 3])
        for image in [png, jpeg, webp] {
            await #expect(throws: FoodBackendError.self) { _ = try await backend.uploadAvatar(image) }
        }
        #expect(seen.all("type") == ["image/png", "image/jpeg", "image/webp"])
        #expect(seen.all("size") == ["108", "54", "15"])
        await #expect(throws: FoodBackendError.self) { _ = try await backend.uploadAvatar(Data("not an image".utf8)) }
        #expect(seen.count("type") == 3)
        try await server.shutdown()
    }

    @Test func anImageForAnyImageTypeGoesWithItsOwnType() async throws {
        let heic = Data([0, 0, 0, 0x18] + Array("ftypheic".utf8) + [1, 2, 3, 4])
        let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0])
        for (image, expected) in [(heic, "image/heic"), (png, "image/png"), (Data("text".utf8), "image/*")] {
            var request = HTTPRequest(method: .post, scheme: "http", authority: "x", path: "/v1/meals/1/photo")
            request.headerFields[.contentType] = "image/*"
            let sent = try await ImageTypeMiddleware().intercept(
                request, body: HTTPBody(image), baseURL: URL(string: "http://x")!, operationID: "post/v1/meals/{id}/photo"
            ) { request, body, _ in
                let bytes = try await Data(collecting: body!, upTo: 1 << 20)
                return (HTTPResponse(status: .ok, headerFields: [.contentType: request.headerFields[.contentType] ?? "", .contentLength: "\(bytes.count)"]), nil)
            }
            #expect(sent.0.headerFields[.contentType] == expected)
            #expect(sent.0.headerFields[.contentLength] == "\(image.count)")
        }
    }

    @Test func anETagIsSentBackInIfMatchAsItCame() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            seen.add("if-match", request.headers.first(name: "If-Match") ?? "none")
            return .problem(.preconditionFailed, "precondition_failed")
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")))
        let meal = Components.Schemas.MealInput(
            eatenAt: Date(), items: [.init(calories: 1, carbsG: 0, fatG: 0, grams: 1, name: "x", proteinG: 0)], name: "x")
        await #expect(throws: FoodBackendError.self) {
            _ = try await backend.send {
                try await $0.putV1MealsId(path: .init(id: "00000000-0000-4000-8000-000000000001"), headers: .init(ifMatch: #""v3-a=b""#), body: .json(meal)).ok
            }
        }
        #expect(seen.all("if-match") == [#""v3-a=b""#])
        try await server.shutdown()
    }

    /// The codes the services send for these cases, each as the case an app switches on; an account
    /// deleted on another device signs this one out, as a revoked session does.
    @Test func theServersCodesForCommonCasesAreTyped() async throws {
        let server = try await TestServer { request in
            switch request.path {
            case "/v1/invitations/mine": return .problem(.forbidden, "email_unverified")
            case "/v1/profiles/me/avatar": return .problem(.payloadTooLarge, "payload_too_large")
            default: return .problem(.unauthorized, "account_deleted")
            }
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")))
        await #expect(throws: FoodBackendError.self) {
            do { _ = try await backend.send { try await $0.getV1InvitationsMine().ok } } catch let error as FoodBackendError {
                #expect(error.code == .emailNotVerified, "\(error)")
                throw error
            }
        }
        await #expect(throws: FoodBackendError.self) {
            do { _ = try await backend.uploadAvatar(Data([0xFF, 0xD8, 0xFF, 0xE0])) } catch let error as FoodBackendError {
                #expect(error.code == .tooLarge && error.status == 413, "\(error)")
                throw error
            }
        }
        #expect(await backend.currentSession != nil)
        await #expect(throws: FoodBackendError.self) {
            do { _ = try await backend.send { try await $0.getV1NotificationsUnreadCount().ok } } catch let error as FoodBackendError {
                #expect(error.code == .accountDeleted, "\(error)")
                throw error
            }
        }
        #expect(await backend.currentSession == nil)
        try await server.shutdown()
    }

    /// A 503 whose `Retry-After` is longer than the client waits is the caller's to handle, as a
    /// typed error: its body, read to see whether it is final, is handed on, not read twice.
    @Test func aWaitLongerThanTheClientsIsAnsweredAsTheServersProblem() async throws {
        let seen = Seen()
        let server = try await TestServer { _ in
            seen.add("request")
            return .problem(.serviceUnavailable, "service_unavailable", headers: [("Retry-After", "30")])
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")))
        await #expect(throws: FoodBackendError.self) {
            do { _ = try await backend.send { try await $0.getV1NotificationsUnreadCount().ok } } catch let error as FoodBackendError {
                #expect(error.status == 503 && error.rawCode == "service_unavailable" && error.retryAfter == 30, "\(error)")
                throw error
            }
        }
        #expect(seen.count("request") == 1)
        try await server.shutdown()
    }

    /// A conditional change whose answer was lost may have been made: sent again, it would meet its
    /// own change as someone else's (`412`). It is the caller's to read again; an unconditional
    /// read is still retried.
    @Test func aConditionalChangeIsNotSentAgainAfterAnAnswerThatMayHaveCome() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            seen.add(request.method.rawValue)
            return seen.count(request.method.rawValue) == 1 ? .problem(.badGateway, "bad_gateway") : .problem(.preconditionFailed, "precondition_failed")
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")))
        let meal = Components.Schemas.MealInput(
            eatenAt: Date(), items: [.init(calories: 1, carbsG: 0, fatG: 0, grams: 1, name: "x", proteinG: 0)], name: "x")
        await #expect(throws: FoodBackendError.self) {
            do {
                _ = try await backend.send {
                    try await $0.putV1MealsId(path: .init(id: "00000000-0000-4000-8000-000000000001"), headers: .init(ifMatch: #""v3""#), body: .json(meal)).ok
                }
            } catch let error as FoodBackendError {
                #expect(error.status == 502, "\(error)")
                throw error
            }
        }
        #expect(seen.count("PUT") == 1)
        await #expect(throws: FoodBackendError.self) {
            _ = try await backend.send { try await $0.getV1MealsId(path: .init(id: "00000000-0000-4000-8000-000000000001")).ok }
        }
        #expect(seen.count("GET") == 2)
        // A keyed POST with `If-Match` (a training log) is answered again from its key: sent again.
        let log = Components.Schemas.LogInput(performedAt: Date(), sets: [.init(block: 1, done: true, reps: 5, set: 1)])
        await #expect(throws: FoodBackendError.self) {
            _ = try await backend.send {
                try await $0.postV1TrainingSessionsIdLog(
                    path: .init(id: "00000000-0000-4000-8000-000000000002"), headers: .init(ifMatch: #""4""#), body: .json(log)
                ).ok
            }
        }
        #expect(seen.count("POST") == 2)
        try await server.shutdown()
    }

    @Test func cursorPagesAreReadAsOneSequence() async throws {
        let seen = Seen()
        let server = try await TestServer { request in
            let cursor = request.query["cursor"]
            seen.add("cursor", cursor ?? "first")
            func mute(_ n: Int) -> String {
                #"{"id":"00000000-0000-4000-8000-00000000000\#(n)","username":null,"display_name":"M\#(n)","avatar_url":null,"is_verified":false,"muted_at":"2026-11-28T10:00:00Z"}"#
            }
            switch cursor {
            case nil: return .json(#"{"items":[\#(mute(1)),\#(mute(2))],"next_cursor":"c2"}"#)
            case "c2": return .json(#"{"items":[\#(mute(3))],"next_cursor":"c3"}"#)
            default: return .json(#"{"items":[\#(mute(4))],"next_cursor":null}"#)
            }
        }
        let backend = FoodBackend(baseURL: server.url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: testToken("a"), refreshToken: "r")))
        let mutes = backend.pages { api, cursor in
            let page = try await api.getV1Mutes(query: .init(limit: 2, cursor: cursor)).ok.body.json
            return (page.items, page.nextCursor)
        }
        var names: [String] = []
        for try await mute in mutes { names.append(mute.value1.displayName ?? "") }
        #expect(names == ["M1", "M2", "M3", "M4"])
        #expect(seen.all("cursor") == ["first", "c2", "c3"])
        try await server.shutdown()
    }
}
