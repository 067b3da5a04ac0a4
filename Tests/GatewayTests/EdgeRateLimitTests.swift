import Foundation
@testable import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOPosix
import ServiceKitCore
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing
import TestSupport

/// Rate limits at the edge: the table, the count per caller and window, what the responses say, and
/// the count shared between gateway processes through Redis.
@Suite struct EdgeRateLimitTests {
    static let noon = Date(timeIntervalSince1970: 1_800_000_000)  // a whole minute

    /// An address in IPv6's documentation range that no other run has counted: the tests that go
    /// through Redis share its counts with every earlier run and every other process.
    static func freshAddress(host: Int) -> String {
        "2001:db8:\(String(UInt16.random(in: 1...UInt16.max), radix: 16)):\(String(UInt16.random(in: 1...UInt16.max), radix: 16))::\(host)"
    }

    /// A window of an hour or more whose present one has at least half its length left. Windows
    /// are counted from the epoch, so an hour's window ends on every hour; a test sending across
    /// that end would see its counts start afresh.
    static func aWindowWithTimeLeft(now: Date = Date()) -> Duration {
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        for seconds in Int64(3600)...86_400 where nowMs % (seconds * 1000) < seconds * 500 { return .seconds(seconds) }
        return .seconds(86_400)
    }

    /// Just before an hour ends, as at any other time, the tests' window has half its length left.
    @Test func theTestsWindowHasTimeLeft() {
        for offset in [-1.0, -0.001, 0, 1, 1799, 1800, 3599] {
            let now = Self.noon.addingTimeInterval(offset)
            let seconds = Self.aWindowWithTimeLeft(now: now).components.seconds
            let elapsed = Int64(now.timeIntervalSince1970 * 1000) % (seconds * 1000)
            #expect(seconds >= 3600 && elapsed < seconds * 500, "\(offset): \(seconds) s")
        }
    }

    @Test func theTableIsReadAndTheLongestPrefixWins() throws {
        var env = EnvironmentReader(["RATE_LIMITS": "/v1/auth=5/60s, /v1/meals=100/2m, /=50/10s"])
        let table = RateLimitTable(reading: &env)
        #expect(env.problems.isEmpty)
        #expect(table.rule(for: "/v1/auth/login")?.max == 5 && table.rule(for: "/v1/authors")?.max == 50)
        #expect(table.rule(for: "/v1/meals/x")?.window == .seconds(120) && table.rule(for: "/v1/meals")?.name == "meals")
        #expect(table.rule(for: "/healthz")?.name == "default")
        var off = EnvironmentReader(["RATE_LIMITS": "off"])
        #expect(RateLimitTable(reading: &off).isEmpty)
        var bad = EnvironmentReader(["RATE_LIMITS": "/v1/auth=5, v1=3/60s, /x=0/60s, /y=3/9h"])
        _ = RateLimitTable(reading: &bad)
        #expect(bad.problems.count == 4, "\(bad.problems)")
        #expect(RateLimitTable.standard.rule(for: "/v1/auth/signup")?.max == 300)
    }

    @Test func eachCallerHasItsOwnCountForItsWindow() {
        let limiter = EdgeRateLimiter(
            table: RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 3, window: .seconds(60))]), redis: nil, verifier: nil, logger: TestEnvironment.logger)
        let decisions = (0..<4).map { _ in limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.7", now: Self.noon)! }
        #expect(decisions.map(\.allowed) == [true, true, true, false])
        #expect(decisions.map(\.remaining) == [2, 1, 0, 0])
        #expect(decisions[0].reset == 60)
        let headers = Dictionary(uniqueKeysWithValues: decisions[0].headers.map { ($0.0.canonicalName, $0.1) })
        #expect(headers["ratelimit-policy"] == "\"default\";q=3;w=60" && headers["ratelimit"] == "\"default\";r=2;t=60")
        let problem = decisions[3].problem
        #expect(problem.status == .tooManyRequests && problem.code == "rate_limited" && problem.headers[.retryAfter] == "60")
        // Another address, and the next window, start afresh.
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.8", now: Self.noon)?.allowed == true)
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.7", now: Self.noon + 60)?.allowed == true)
        // A token this gateway has not verified counts by address.
        #expect(limiter.decide(path: "/v1/meals", authorization: "Bearer not.a.token", client: "198.51.100.7", now: Self.noon)?.allowed == false)
    }

    /// Apple's server notifications have a limit of their own, which Apple's traffic (a few
    /// notifications per purchase event) never meets and a flood of made-up payloads does.
    @Test func applesNotificationsHaveALimitOfTheirOwn() async throws {
        let standard = try #require(RateLimitTable.standard.rule(for: "/v1/webhooks/app-store"))
        #expect(standard.max == 60 && standard.window == .seconds(60) && standard.name == "app-store")
        let address = Self.freshAddress(host: 4)
        // The standard rule over a window that does not end while the test sends.
        let window = Self.aWindowWithTimeLeft()
        @Sendable func limited(_ config: inout GatewayConfig) throws {
            config.redis = try TestEnvironment.redis()
            config.rateLimits = RateLimitTable(rules: [
                RateLimitRule(prefix: standard.prefix, max: standard.max, window: window), RateLimitRule(prefix: "/", max: 1200, window: window),
            ])
            config.trustedProxies = try TrustedProxies(parsing: "127.0.0.1/32")
        }
        try await EdgePolicyTests.withGateway(configure: limited) { client in
            for index in 0..<60 {
                let sent = try await client.execute(uri: "/v1/webhooks/app-store", method: .post, headers: [.forwardedFor: address], body: ByteBuffer(string: "{}"))
                #expect(sent.status == .ok, "notification \(index)")
            }
            let refused = try await client.execute(uri: "/v1/webhooks/app-store", method: .post, headers: [.forwardedFor: address], body: ByteBuffer(string: "{}"))
            #expect(refused.status == .tooManyRequests && refused.headers[HTTPField.Name("RateLimit-Policy")!] == "\"app-store\";q=60;w=\(window.components.seconds)")
            #expect(try GatewayTests.problem(refused).code == "rate_limited")
            // The rest of the API from that address has its own count.
            #expect(try await client.execute(uri: "/v1/profiles/me", method: .get, headers: [.forwardedFor: address]).status == .ok)
        }
    }

    /// Made-up bearer tokens cost a signature check each: an address has its tokens verified at most
    /// `RATE_LIMIT_TOKEN_CHECKS` times a minute, whatever its count says; beyond that they count by
    /// address, unverified.
    @Test func aFloodOfForgedTokensIsRefusedByAddressAndVerifiedWithinABudget() async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        let address = Self.freshAddress(host: 3)
        let adminPort = try RedisServer.freePort()
        @Sendable func limited(_ config: inout GatewayConfig) throws {
            config.tokens = issuer.tokenConfig
            config.admin = .init(host: "127.0.0.1", port: adminPort)
            config.rateLimits = RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 10, window: Self.aWindowWithTimeLeft())])
            config.tokenChecksPerAddress = 3
            config.trustedProxies = try TrustedProxies(parsing: "127.0.0.1/32")
        }
        // A real token's header (its key id) and claims, each with a signature of random bytes.
        let real = try await issuer.token(userID: UUID()).split(separator: ".")
        @Sendable func forged() -> String {
            "\(real[0]).\(real[1]).\(Base64URL.encode((0..<64).map { _ in UInt8.random(in: 0...255) }))"
        }
        try await EdgePolicyTests.withGateway(configure: limited) { client in
            var statuses: [HTTPResponse.Status] = []
            let started = Date()
            for _ in 0..<40 {
                let headers: HTTPFields = [.forwardedFor: address, .authorization: "Bearer \(forged())"]
                statuses.append(try await client.execute(uri: "/v1/profiles/me", method: .get, headers: headers).status)
            }
            let ended = Date()
            #expect(statuses.prefix(10).allSatisfy { $0 == .ok } && statuses.dropFirst(10).allSatisfy { $0 == .tooManyRequests }, "\(statuses)")
            // The checks run off the requests' path: the three the budget allows are awaited.
            @Sendable func checked() async throws -> Int { Int(try await MetricsScrape.value("gateway_token_signature_checks_total", port: adminPort) ?? 0) }
            try await waitUntil(.seconds(15)) { try await checked() >= 3 }
            let count = try await checked()
            // The budget is per minute, and refused requests spend it too: should the requests
            // straddle a minute's end, each minute has its own three.
            let minutes = Set([started, ended].map { Int($0.timeIntervalSince1970 / 60) }).count
            #expect(minutes == 1 ? count == 3 : count <= 3 * minutes, "\(count) signatures checked")
        }
    }

    /// Many users behind one address fill its count: a user whose first request the address's
    /// count refuses is verified all the same, and its requests count as its own once it is.
    @Test func aUserRefusedByItsAddresssCountIsVerifiedAndThenCountsAsItself() async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        let address = Self.freshAddress(host: 5)
        @Sendable func limited(_ config: inout GatewayConfig) throws {
            config.tokens = issuer.tokenConfig
            config.rateLimits = RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 2, window: Self.aWindowWithTimeLeft())])
            config.trustedProxies = try TrustedProxies(parsing: "127.0.0.1/32")
        }
        let token = try await issuer.token(userID: UUID())
        try await EdgePolicyTests.withGateway(configure: limited) { client in
            for _ in 0..<2 { #expect(try await client.execute(uri: "/v1/profiles/me", method: .get, headers: [.forwardedFor: address]).status == .ok) }
            let signedIn: HTTPFields = [.forwardedFor: address, .authorization: "Bearer \(token)"]
            #expect(try await client.execute(uri: "/v1/profiles/me", method: .get, headers: signedIn).status == .tooManyRequests)
            // The check runs off the request's path: the next requests pass once it is done.
            try await waitUntil(.seconds(15)) {
                try await client.execute(uri: "/v1/profiles/me", method: .get, headers: signedIn).status == .ok
            }
            // The address itself stays refused.
            #expect(try await client.execute(uri: "/v1/profiles/me", method: .get, headers: [.forwardedFor: address]).status == .tooManyRequests)
        }
    }

    /// Rules of one name share their Redis key, and so their count.
    @Test func rulesOfOneNameCountTogether() {
        let table = RateLimitTable(rules: [
            RateLimitRule(prefix: "/v1/auth", max: 2, window: .seconds(60)), RateLimitRule(prefix: "/v2/auth", max: 2, window: .seconds(60)),
            RateLimitRule(prefix: "/", max: 100, window: .seconds(60)),
        ])
        let limiter = EdgeRateLimiter(table: table, redis: nil, verifier: nil, logger: TestEnvironment.logger)
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: "198.51.100.9", now: Self.noon)?.allowed == true)
        #expect(limiter.decide(path: "/v2/auth/login", authorization: nil, client: "198.51.100.9", now: Self.noon)?.allowed == true)
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: "198.51.100.9", now: Self.noon)?.allowed == false)
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.9", now: Self.noon)?.allowed == true)
    }

    /// A table full of live counts makes room for a new key from counts that matter least (windows
    /// ended, then counts far under their limit), never from a caller near its limit: a flood of
    /// addresses neither wipes a guesser's count nor, at a window's start, refuses everyone. Only a
    /// table of keys all at half their limit or more refuses a new one, until a window ends.
    @Test func aFullTableKeepsEveryCountThatMatters() {
        let table = RateLimitTable(rules: [
            RateLimitRule(prefix: "/v1/auth", max: 2, window: .seconds(900)), RateLimitRule(prefix: "/", max: 100, window: .seconds(1)),
        ])
        let limiter = EdgeRateLimiter(table: table, redis: nil, verifier: nil, logger: TestEnvironment.logger, syncInterval: .seconds(1), capacity: 3)
        let guesser = "198.51.100.20"
        for _ in 0..<2 { #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: guesser, now: Self.noon)?.allowed == true) }
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: guesser, now: Self.noon)?.allowed == false)
        // A flood of addresses on a route with a short window, within one second: each gets room.
        let flood = (21..<40).map { limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.\($0)", now: Self.noon + 0.5)! }
        #expect(flood.allSatisfy { $0.allowed })
        // The guesser's count stayed, through the flood and after it.
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: guesser, now: Self.noon + 0.5)?.allowed == false)
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: guesser, now: Self.noon + 2)?.allowed == false)
        // Two more callers at half their limit: the table is full of counts that matter.
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: "198.51.100.50", now: Self.noon + 2)?.allowed == true)
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: "198.51.100.51", now: Self.noon + 2)?.allowed == true)
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: "198.51.100.52", now: Self.noon + 2)?.allowed == false)
        // Once their window ends, there is room again, and the guesser starts afresh.
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: "198.51.100.52", now: Self.noon + 900)?.allowed == true)
        #expect(limiter.decide(path: "/v1/auth/login", authorization: nil, client: guesser, now: Self.noon + 900)?.allowed == true)
    }

    /// With Redis, a full table lets go of counts it has already added there: their totals come
    /// back with the key's next sync, so the limit still holds, to within one sync's requests. A
    /// count whose sync is still unanswered is kept.
    @Test func aFullTableLetsGoOfCountsRedisHolds() async throws {
        let table = RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 3, window: .seconds(3600))])
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        let limiter = EdgeRateLimiter(table: table, redis: redis, verifier: nil, logger: TestEnvironment.logger, capacity: 2)
        let now = Self.noon
        let first = Self.freshAddress(host: 4)
        let second = Self.freshAddress(host: 5)
        for _ in 0..<3 { #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: first, now: now)?.allowed == true) }
        for _ in 0..<2 { #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: second, now: now)?.allowed == true) }
        // Both near their limit and not yet in Redis: nothing can go, and a third address waits.
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: Self.freshAddress(host: 6), now: now)?.allowed == false)
        await limiter.sync(now: now)
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: Self.freshAddress(host: 7), now: now)?.allowed == true)
        // The first address's count was let go here; its next request is counted again, and the sync
        // brings back its total from Redis.
        _ = limiter.decide(path: "/v1/meals", authorization: nil, client: first, now: now)
        await limiter.sync(now: now)
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: first, now: now)?.allowed == false)
        await redis.close()
    }

    /// A count sent to Redis whose answer has not come is kept, however far under its limit: the
    /// answer is applied to the key's counter, and one made anew in its place would take it.
    @Test func aCountBeingSyncedIsKept() async throws {
        // A Redis that accepts the connection and never answers: the sync waits out its timeout.
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(silent.localAddress?.port)
        var config = try #require(RedisConfiguration(url: "redis://127.0.0.1:\(port)"))
        // Long enough that the refusal below is seen while the sync waits, on a stalled machine too.
        config.commandTimeout = .seconds(10)
        let redis = RedisClient(configuration: config, logger: TestEnvironment.logger)
        let table = RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 4, window: .seconds(3600))])
        let limiter = EdgeRateLimiter(table: table, redis: redis, verifier: nil, logger: TestEnvironment.logger, capacity: 2)
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.60", now: Self.noon)?.allowed == true)
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.61", now: Self.noon)?.allowed == true)
        let syncing = Task { await limiter.sync(now: Self.noon) }
        try await waitUntil(.seconds(15)) { limiter.countsBeingSent == 2 }
        // Both are under half their limit, and neither can go while its sync is unanswered.
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.62", now: Self.noon)?.allowed == false)
        await syncing.value
        await redis.close()
        try await silent.close()
        // The failed sync gave the counts back to be sent again: still counted, never less.
        #expect(limiter.countsBeingSent == 0)
        #expect(limiter.decide(path: "/v1/meals", authorization: nil, client: "198.51.100.60", now: Self.noon)?.remaining == 2)
    }

    /// Two gateway processes share one count through Redis: once each has synced, the limit holds
    /// across both, to within one sync's requests.
    @Test func processesShareTheirCountThroughRedis() async throws {
        let length = Self.aWindowWithTimeLeft()
        let table = RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 10, window: length)])
        let client = "203.0.113.\(Int.random(in: 1...250))-\(UUID().uuidString.prefix(8))"
        let first = EdgeRateLimiter(table: table, redis: RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger), verifier: nil, logger: TestEnvironment.logger)
        let second = EdgeRateLimiter(table: table, redis: RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger), verifier: nil, logger: TestEnvironment.logger)
        for _ in 0..<6 { #expect(first.decide(path: "/v1/meals", authorization: nil, client: client)?.allowed == true) }
        await first.sync()
        // The key every gateway process (and every version of it, during a rolling deploy) counts under.
        let window = Int64(Date().timeIntervalSince1970 * 1000) / (length.components.seconds * 1000)
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        let counted = try await redis.send("GET", RedisArgument("ratelimit:default:a:\(client):\(window)"))
        await redis.close()
        #expect(counted.int == 6 || counted.string == "6", "\(counted)")
        for _ in 0..<4 { #expect(second.decide(path: "/v1/meals", authorization: nil, client: client)?.allowed == true) }
        await second.sync()
        // The second has read the total (10): it refuses.
        #expect(second.decide(path: "/v1/meals", authorization: nil, client: client)?.allowed == false)
        // The first had read 6: one more goes through before its next sync tells it.
        #expect(first.decide(path: "/v1/meals", authorization: nil, client: client)?.allowed == true)
        await first.sync()
        #expect(first.decide(path: "/v1/meals", authorization: nil, client: client)?.allowed == false)
    }

    @Test func theGatewayAnswers429WithTheHeadersOnBothPaths() async throws {
        // A client of its own behind a trusted balancer: counts in Redis outlive the test run.
        let address = Self.freshAddress(host: 1)
        let from: HTTPFields = [.forwardedFor: address]
        let redis = try TestEnvironment.redis()
        let window = Self.aWindowWithTimeLeft()
        @Sendable func limited(_ config: inout GatewayConfig) throws {
            config.redis = redis
            config.rateLimits = RateLimitTable(rules: [
                RateLimitRule(prefix: "/v1/auth", max: 2, window: window), RateLimitRule(prefix: "/", max: 1000, window: window),
            ])
            config.trustedProxies = try TrustedProxies(parsing: "127.0.0.1/32")
        }
        try await EdgePolicyTests.withGateway(configure: limited) { client in
            // Proxied.
            let first = try await client.execute(uri: "/v1/auth/me", method: .get, headers: from)
            #expect(first.status == .ok && first.headers[HTTPField.Name("RateLimit")!]?.hasPrefix("\"auth\";r=1;t=") == true)
            #expect(first.headers[HTTPField.Name("RateLimit-Policy")!] == "\"auth\";q=2;w=\(window.components.seconds)")
            _ = try await client.execute(uri: "/v1/auth/me", method: .get, headers: from)
            let refused = try await client.execute(uri: "/v1/auth/me", method: .get, headers: from)
            #expect(refused.status == .tooManyRequests)
            #expect(try GatewayTests.problem(refused).code == "rate_limited")
            #expect(refused.headers[.retryAfter].flatMap(Int.init).map { $0 > 0 && $0 <= window.components.seconds } == true)
            // The router's path (an OPTIONS goes there) counts in the same place.
            let routed = try await client.execute(uri: "/v1/auth/me", method: .options, headers: from)
            #expect(routed.status == .tooManyRequests)
            // Another group has its own count.
            let other = try await client.execute(uri: "/v1/profiles/me", method: .get, headers: from)
            #expect(other.status == .ok && other.headers[HTTPField.Name("RateLimit")!]?.hasPrefix("\"default\";r=999;") == true)
        }
    }

    /// A verified token counts as its user, on every request of a connection, until it expires; then
    /// the requests count by address again. A token not seen before counts by address while it is
    /// verified off the request's path.
    @Test func aSignedInCallerCountsAsTheUserUntilTheTokenExpires() async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        let address = Self.freshAddress(host: 2)
        @Sendable func limited(_ config: inout GatewayConfig) throws {
            config.tokens = issuer.tokenConfig
            config.tokens.leeway = .zero
            config.rateLimits = RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 100, window: Self.aWindowWithTimeLeft())])
            config.trustedProxies = try TrustedProxies(parsing: "127.0.0.1/32")
        }
        // Long enough to be verified on a loaded machine (the suite runs in parallel) with seconds
        // to spare, short enough to wait out. `exp` is in whole seconds: it may come a second early.
        let ana = try await issuer.token(userID: UUID(), expiresIn: 20)
        let expires = Date().addingTimeInterval(19)
        try await EdgePolicyTests.withGateway(configure: limited) { client in
            /// What the count of this request leaves, from its `RateLimit` header.
            @Sendable func remaining(_ token: String?) async throws -> Int {
                var headers: HTTPFields = [.forwardedFor: address]
                if let token { headers[.authorization] = "Bearer \(token)" }
                let response = try await client.execute(uri: "/v1/profiles/me", method: .get, headers: headers)
                let field = try #require(response.headers[HTTPField.Name("RateLimit")!])
                return try #require(field.split(separator: ";").first { $0.hasPrefix("r=") }.flatMap { Int($0.dropFirst(2)) })
            }
            #expect(try await remaining(ana) == 99)
            // Once verified, ana's requests count apart from the address's.
            var byAddress = 1
            var counted = 99
            for _ in 0..<200 where expires.timeIntervalSinceNow > 8 {
                counted = try await remaining(ana)
                if counted == 99 { break }
                byAddress += 1
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(counted == 99)
            #expect(try await remaining(ana) == 98)
            #expect(try await remaining(nil) == 99 - byAddress)
            // Past its expiry the token counts by address again, on the same connections.
            try await Task.sleep(for: .seconds(max(0.1, expires.timeIntervalSinceNow + 1.5)))
            #expect(try await remaining(ana) == 98 - byAddress)
        }
    }
}
