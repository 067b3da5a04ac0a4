import Foundation
import HTTPTypes
import Logging
import ServiceKit
import ServiceLifecycle
import Synchronization

/// One line of `RATE_LIMITS`: at most `max` requests per `window` to paths under `prefix`, per
/// key (the signed-in user, else the client's address).
struct RateLimitRule: Sendable, Equatable {
    let prefix: String
    let max: Int
    let window: Duration
    /// The policy's name in the `RateLimit` headers: `default` for `/`, else the prefix's last segment.
    let name: String
    /// The `RateLimit-Policy` field, the same on every answer the rule counts: made once.
    let policy: String

    init(prefix: String, max: Int, window: Duration) {
        self.prefix = prefix
        self.max = max
        self.window = window
        name = prefix == "/" ? "default" : String(prefix.split(separator: "/").last ?? "default")
        policy = "\"\(name)\";q=\(max);w=\(window.components.seconds)"
    }

    var windowMilliseconds: Int64 { window.components.seconds * 1000 + window.components.attoseconds / 1_000_000_000_000_000 }
}

/// `RATE_LIMITS`: `prefix=max/window` entries (`/v1/auth=300/60s,/=1200/60s`), the longest prefix
/// winning on whole segments. The defaults suit apps behind carrier NAT, where one address is many
/// people: generous per address, and per user once signed in. Apple's server notifications
/// (`/v1/webhooks/app-store`) have a count of their own, 60 a minute per address: Apple sends a few
/// per purchase event, from several addresses, and retries one refused; each made-up payload costs
/// the service a certificate check, so a flood of them is limited like any other.
struct RateLimitTable: Sendable, Equatable {
    static let standard = RateLimitTable(rules: [
        RateLimitRule(prefix: "/v1/auth", max: 300, window: .seconds(60)),
        RateLimitRule(prefix: "/v1/webhooks/app-store", max: 60, window: .seconds(60)),
        RateLimitRule(prefix: "/", max: 1200, window: .seconds(60)),
    ])

    /// Longest prefix first.
    let rules: [RateLimitRule]
    /// For each rule, the first rule of its name: rules of one name count together, as they share
    /// their Redis key.
    let counterRule: [Int]

    init(rules: [RateLimitRule]) {
        let rules = rules.sorted { $0.prefix.count > $1.prefix.count }
        self.rules = rules
        counterRule = rules.map { rule in rules.firstIndex { $0.name == rule.name }! }
    }

    var isEmpty: Bool { rules.isEmpty }

    func rule(for path: some StringProtocol) -> RateLimitRule? {
        ruleIndex(for: path).map { rules[$0] }
    }

    /// The index in `rules` of the rule for `path`.
    func ruleIndex(for path: some StringProtocol) -> Int? {
        rules.firstIndex { $0.prefix == "/" || Self.covers($0.prefix, path) }
    }

    static func covers(_ prefix: String, _ path: some StringProtocol) -> Bool {
        guard path.hasPrefix(prefix) else { return false }
        let rest = path.dropFirst(prefix.count)
        return rest.isEmpty || rest.first == "/"
    }

    /// `RATE_LIMITS`, replacing the defaults when set; `off` turns limiting off.
    init(reading env: inout EnvironmentReader) {
        guard let text = env.optionalString("RATE_LIMITS") else {
            self = .standard
            return
        }
        if text.trimmingCharacters(in: .whitespaces) == "off" {
            self.init(rules: [])
            return
        }
        var rules: [RateLimitRule] = []
        for entry in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            guard let rule = Self.rule(parsing: entry) else {
                env.report("RATE_LIMITS: each entry is /prefix=max/window (window in s or m, e.g. /v1/auth=300/60s), got \"\(entry)\"")
                continue
            }
            rules.append(rule)
        }
        self.init(rules: rules)
    }

    static func rule(parsing entry: String) -> RateLimitRule? {
        let sides = entry.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
        guard sides.count == 2, sides[0].hasPrefix("/") else { return nil }
        let amount = sides[1].split(separator: "/", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
        guard amount.count == 2, let max = Int(amount[0]), max > 0 else { return nil }
        let window: Int?
        if amount[1].hasSuffix("m") {
            window = Int(amount[1].dropLast()).map { $0 * 60 }
        } else if amount[1].hasSuffix("s") {
            window = Int(amount[1].dropLast())
        } else {
            window = nil
        }
        guard let seconds = window, (1...86_400).contains(seconds) else { return nil }
        let prefix = sides[0].count > 1 && sides[0].hasSuffix("/") ? String(sides[0].dropLast()) : sides[0]
        return RateLimitRule(prefix: prefix, max: max, window: .seconds(seconds))
    }
}

/// What the limiter decided for one request, and the headers its response carries.
struct RateDecision: Sendable {
    var allowed: Bool
    var rule: RateLimitRule
    var remaining: Int
    /// Seconds until the window ends.
    var reset: Int

    /// The IETF `RateLimit-Policy` and `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers).
    var headers: [(HTTPField.Name, String)] {
        [
            (Self.policyName, rule.policy),
            (Self.limitName, "\"\(rule.name)\";r=\(remaining);t=\(reset)"),
        ]
    }
    private static let policyName = HTTPField.Name("RateLimit-Policy")!
    private static let limitName = HTTPField.Name("RateLimit")!

    var problem: APIError {
        var error = APIError.tooManyRequests(
            "Too many requests to this part of the API (\(rule.max) every \(rule.window.components.seconds) s).", retryAfterSeconds: reset)
        error.detail += " Try again in \(max(1, reset)) s."
        for (name, value) in headers { error.headers[name] = value }
        return error
    }
}

/// Counts requests per rule and key in fixed windows shared by every gateway process through
/// Redis. A request is decided at once, on the event loop, from this process's count plus the
/// others' as last read; every `syncInterval` the process adds its new requests to Redis
/// (`INCRBY` on `ratelimit:<rule>:<key>:<window>`) and reads the total back. So no request waits for
/// Redis, and across processes a limit holds to within one sync interval's requests. While Redis is
/// out of reach each process still limits on its own count.
final class EdgeRateLimiter: Service, Sendable {
    let table: RateLimitTable
    private let redis: RedisClient?
    private let verifier: TokenVerifier?
    private let logger: Logger
    let syncInterval: Duration
    private let counters = Mutex<[CounterKey: Counter]>([:])
    /// Tokens sent for verification per address (`TrustedProxies.limitKey`) in the current minute,
    /// bounded as the counters are, and the tokens being verified now: a client retrying while its
    /// token is checked spends its address's budget once.
    private struct TokenChecks {
        var spent: [String: (minute: Int64, count: Int)] = [:]
        var inFlight: Set<String> = []
        /// The minute in which `spent` was found full of that minute's addresses: not swept again in it.
        var fullIn: Int64 = .min
    }
    private let tokenChecks = Mutex(TokenChecks())

    /// Keys held at most by default (`capacity`): a flood of addresses cannot grow the table past it.
    static let standardCapacity = 100_000
    /// Keys held at most. A new key in a full table gets room only as `makeRoom` frees it without
    /// losing a count that matters; otherwise its request is refused (`429`).
    let capacity: Int
    /// Until when (Unix ms) a full table is not swept again: a sweep that freed nothing is not redone
    /// for each new key of a flood.
    private let sweepAgainAt = Atomic<Int64>(.min)

    /// Who a count is of: a signed-in user, else a client address (as `TrustedProxies.limitKey` gives it).
    private enum Who: Hashable {
        case user(UUID)
        case address(String)

        /// As the Redis key writes it.
        var text: String {
            switch self {
            case .user(let id): "u:" + id.uuidString.lowercased()
            case .address(let address): "a:" + address
            }
        }
    }

    /// A count's rule, who and window, hashed as values: the Redis key's text
    /// (`ratelimit:<rule>:<who>:<window>`) is written only when the count is shared, not per request,
    /// where printing the user's id and hashing the key were a twelfth of the gateway's CPU.
    private struct CounterKey: Hashable {
        var rule: Int
        var who: Who
        var window: Int64
    }

    private struct Counter {
        var rule: RateLimitRule
        var window: Int64
        /// Counted here and not yet added to Redis.
        var pending: Int
        /// The total in Redis as last read, this process's synced requests included.
        var shared: Int
        /// Sent to Redis by a sync it has not answered yet.
        var sending = 0

        var used: Int { shared + sending + pending }
    }

    /// `RATE_LIMIT_TOKEN_CHECKS`'s default.
    static let standardTokenChecksPerAddress = 60
    let tokenChecksPerAddress: Int

    init(
        table: RateLimitTable, redis: RedisClient?, verifier: TokenVerifier?, tokenChecksPerAddress: Int = standardTokenChecksPerAddress, logger: Logger,
        syncInterval: Duration = .milliseconds(250), capacity: Int = standardCapacity
    ) {
        self.capacity = capacity
        self.table = table
        self.redis = redis
        self.verifier = verifier
        self.tokenChecksPerAddress = tokenChecksPerAddress
        self.logger = logger
        self.syncInterval = syncInterval
    }

    /// Decides one request: nil when no rule applies (no limits). A bearer token this process has
    /// not verified counts by address, and is verified off the request's path (`verifyLater`),
    /// whether or not the address's count let the request through: many users behind one address
    /// (a carrier's NAT, an office) fill its count, and a user refused there counts as itself once
    /// its token is checked instead of waiting for the window to end.
    func decide(path: some StringProtocol, authorization: String?, client: String, now: Date = Date()) -> RateDecision? {
        if let user = signedIn(authorization, now: now)?.user { return decide(path: path, user: user, client: client, now: now) }
        let decision = decide(path: path, user: nil, client: client, now: now)
        if let authorization, decision != nil { verifyLater(authorization, client: client, now: now) }
        return decision
    }

    /// The decision for a request of `user` (nil: anonymous, or a token not yet verified here).
    func decide(path: some StringProtocol, user: UUID?, client: String, now: Date = Date()) -> RateDecision? {
        guard let index = table.ruleIndex(for: path) else { return nil }
        let rule = table.rules[index]
        let who: Who
        if let user {
            who = .user(user)
        } else {
            who = .address(TrustedProxies.limitKey(client))
        }
        let windowMs = rule.windowMilliseconds
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        let window = nowMs / windowMs
        let reset = Int((window + 1) * windowMs - nowMs + 999) / 1000
        let key = CounterKey(rule: table.counterRule[index], who: who, window: window)
        return counters.withLock { counters in
            let known = counters[key]
            if known == nil, counters.count >= capacity, !makeRoom(in: &counters, now: nowMs) {
                return RateDecision(allowed: false, rule: rule, remaining: 0, reset: reset)
            }
            var counter = known ?? Counter(rule: rule, window: window, pending: 0, shared: 0)
            let used = counter.used
            guard used < rule.max else {
                return RateDecision(allowed: false, rule: rule, remaining: 0, reset: reset)
            }
            counter.pending += 1
            counters[key] = counter
            return RateDecision(allowed: true, rule: rule, remaining: rule.max - used - 1, reset: reset)
        }
    }

    /// The signed-in user of a bearer token this process has verified already, and until when the
    /// token holds; nil for a token it has not seen, which counts by address (see `verifyLater`).
    func signedIn(_ authorization: String?, now: Date) -> (user: UUID, until: Date)? {
        guard let verifier, let authorization, let token = TokenMiddleware<ServiceRequestContext>.bearerToken(authorization) else { return nil }
        guard let (caller, expiresAt) = verifier.cachedCallerExpiring(token, now: now) else { return nil }
        return (caller.userID, expiresAt)
    }

    /// Verifies a token not seen before off the request's path, so that the caller's next requests
    /// count as its user once the check is done: at most `tokenChecksPerAddress` times a minute per
    /// address, whatever the address's rate limit, and once for a token already being checked. A
    /// signature check costs far more than a count, so made-up tokens from one address cost at most
    /// that many, however many are sent; past them a caller's requests go on counting by address
    /// until the next minute.
    func verifyLater(_ authorization: String, client: String, now: Date) {
        guard let verifier, tokenChecksPerAddress > 0, let token = TokenMiddleware<ServiceRequestContext>.bearerToken(authorization) else { return }
        let address = TrustedProxies.limitKey(client)
        let minute = Int64(now.timeIntervalSince1970 / 60)
        let allowed = tokenChecks.withLock { checks in
            guard !checks.inFlight.contains(token), checks.inFlight.count < capacity else { return false }
            var spent = checks.spent[address].flatMap { $0.minute == minute ? $0.count : nil } ?? 0
            guard spent < tokenChecksPerAddress else { return false }
            spent += 1
            if checks.spent.count >= capacity, checks.spent[address] == nil {
                // Every address in the table spent a check this minute: forgetting them would give
                // each its budget again, so this one is not verified (it goes on counting by address),
                // and the table is not swept again for each new address until the minute is over.
                guard checks.fullIn != minute else { return false }
                checks.spent = checks.spent.filter { $0.value.minute >= minute }
                guard checks.spent.count < capacity else {
                    checks.fullIn = minute
                    return false
                }
            }
            checks.spent[address] = (minute, spent)
            checks.inFlight.insert(token)
            return true
        }
        guard allowed else { return }
        Task {
            _ = try? await verifier.verify(token)
            _ = self.tokenChecks.withLock { $0.inFlight.remove(token) }
        }
    }

    /// Counts sent to Redis by syncs not yet answered, for tests.
    package var countsBeingSent: Int { counters.withLock { $0.values.reduce(0) { $0 + $1.sending } } }

    /// Frees room in a full table, losing no count that matters: windows that have ended go, each
    /// by its own rule's length (rules' windows differ, so their numbers cannot be compared); then
    /// counts Redis holds whole, whose totals come back with their key's next sync (a key let go that
    /// way can exceed its limit by one sync interval's requests, as processes can between them); then
    /// counts under half their limit, which lose at most that (a flood of new keys cannot refuse
    /// everyone at each window's start, Redis or not, while a caller near its limit keeps its count).
    /// False when the table is still full: every key at half its limit or more.
    private func makeRoom(in counters: inout [CounterKey: Counter], now nowMs: Int64) -> Bool {
        guard nowMs >= sweepAgainAt.load(ordering: .relaxed) else { return false }
        counters = counters.filter { ($0.value.window + 1) * $0.value.rule.windowMilliseconds > nowMs }
        if counters.count >= capacity { counters = counters.filter { $0.value.pending > 0 || $0.value.sending > 0 } }
        // A count whose sync is unanswered stays: the answer is applied to the key's counter, which a
        // new one in its place would take for its own.
        if counters.count >= capacity { counters = counters.filter { 2 * $0.value.used >= $0.value.rule.max || $0.value.sending > 0 } }
        guard counters.count < capacity else {
            let interval = syncInterval.components
            sweepAgainAt.store(nowMs + interval.seconds * 1000 + interval.attoseconds / 1_000_000_000_000_000, ordering: .relaxed)
            return false
        }
        return true
    }

    func run() async throws {
        guard redis != nil, !table.isEmpty else {
            // Nothing to share; a service that returns would stop the gateway.
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: self.syncInterval)
                await self.sync()
            }
        }
        await redis?.close()
    }

    /// Adds this process's new requests to Redis and reads each total back, in one round trip.
    func sync(now: Date = Date()) async {
        guard let redis else { return }
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        let batch: [(key: CounterKey, count: Int, ttl: Int64)] = counters.withLock { counters in
            var batch: [(CounterKey, Int, Int64)] = []
            for (key, counter) in counters {
                // A finished window is forgotten; its count in Redis expires on its own.
                if (counter.window + 1) * counter.rule.windowMilliseconds <= nowMs {
                    counters[key] = nil
                    continue
                }
                guard counter.pending > 0 else { continue }
                batch.append((key, counter.pending, 2 * counter.rule.windowMilliseconds))
                counters[key]?.sending += counter.pending
                counters[key]?.pending = 0
            }
            return batch
        }
        guard !batch.isEmpty else { return }
        var commands: [[RedisArgument]] = []
        for (key, count, ttl) in batch {
            let name = "ratelimit:\(table.rules[key.rule].name):\(key.who.text):\(key.window)"
            commands.append(["INCRBY", RedisArgument(name), RedisArgument(count)])
            commands.append(["PEXPIRE", RedisArgument(name), RedisArgument(Int(ttl))])
        }
        do {
            let replies = try await redis.pipeline(commands)
            // Counts now in Redis can make room in a full table: it may be swept again.
            sweepAgainAt.store(.min, ordering: .relaxed)
            counters.withLock { counters in
                for (index, item) in batch.enumerated() {
                    guard var counter = counters[item.key] else { continue }
                    counter.sending -= item.count
                    if let total = replies[2 * index].int {
                        counter.shared = max(counter.shared, total)
                    } else {
                        counter.pending += item.count
                    }
                    counters[item.key] = counter
                }
            }
        } catch {
            // Counted here all the same (in `sending` meanwhile); the next sync adds them to Redis.
            counters.withLock { counters in
                for item in batch {
                    counters[item.key]?.sending -= item.count
                    counters[item.key]?.pending += item.count
                }
            }
            logger.debug("rate limit counts not shared", metadata: ["error": "\(error)"])
        }
    }
}
