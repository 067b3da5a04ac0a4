import AsyncHTTPClient
import Foundation
import JWTKit
import Logging
import Models
import NIOCore
import ServiceKitCore
import ServiceKitHTTP
import Synchronization

/// Where the public keys of the token issuer come from.
public protocol JWKSSource: Sendable {
    func fetch() async throws -> JWKS
}

/// The issuer's `/.well-known/jwks.json` over HTTP.
public struct HTTPJWKSSource: JWKSSource {
    public let url: String
    public let httpClient: HTTPClient

    public init(url: String, httpClient: HTTPClient) {
        self.url = url
        self.httpClient = httpClient
    }

    public func fetch() async throws -> JWKS {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Accept", value: "application/json")
        let response = try await httpClient.execute(request, timeout: .seconds(5))
        guard response.status == .ok else { throw TokenError.keysUnavailable("JWKS at \(url) answered \(response.status.code)") }
        let body = try await response.body.collect(upTo: 1 << 20)
        return try JSONDecoder().decode(JWKS.self, from: Data(buffer: body))
    }
}

/// Keys known in advance: the issuer checking its own tokens, or a test.
public struct StaticJWKSSource: JWKSSource {
    public let jwks: JWKS
    public init(jwks: JWKS) { self.jwks = jwks }
    public func fetch() async throws -> JWKS { jwks }
}

/// Why a token was refused. Each maps to a 401 with a stable code.
public enum TokenError: Error, Equatable, CustomStringConvertible {
    case malformed(String)
    case unsupportedAlgorithm(String)
    case unknownKey(String)
    case badSignature
    case expired
    case notYetValid
    case wrongIssuer(String)
    case wrongAudience
    case invalidClaims(String)
    case keysUnavailable(String)

    public var description: String {
        switch self {
        case .malformed(let why): "malformed token: \(why)"
        case .unsupportedAlgorithm(let alg): "algorithm \(alg) is not accepted; tokens are ES256"
        case .unknownKey(let kid): "no key with kid \(kid)"
        case .badSignature: "signature does not verify"
        case .expired: "token has expired"
        case .notYetValid: "token is not valid yet"
        case .wrongIssuer(let iss): "token was issued by \(iss), not by this backend"
        case .wrongAudience: "token is not meant for this backend"
        case .invalidClaims(let why): "token claims are invalid: \(why)"
        case .keysUnavailable(let why): "signing keys unavailable: \(why)"
        }
    }

    /// The problem the client sees.
    public var apiError: APIError {
        switch self {
        case .expired: .unauthorized("The access token has expired; refresh it.", code: "token_expired")
        case .keysUnavailable: APIError(.serviceUnavailable, code: "keys_unavailable", detail: "Tokens cannot be checked right now; try again shortly.")
        default: .unauthorized("The access token is invalid: \(description).", code: "invalid_token")
        }
    }
}

/// Checks access tokens locally against the issuer's cached public keys: no call per request. An
/// unknown `kid` (the issuer rotated its key) refreshes the keys, at most once per `minRefreshInterval`.
public final class TokenVerifier: Sendable {
    /// Keys are reloaded at least this often, so a key the issuer withdrew stops being trusted.
    public static let maxKeyAge: Duration = JWKSCache.maxKeyAge

    private let config: TokenConfig
    private let keys: JWKSCache
    private let verified = VerifiedTokens()
    private let signaturesChecked = Atomic<Int>(0)
    private let onSignatureCheck: (@Sendable () -> Void)?

    /// `onSignatureCheck` hears of each signature checked (a metric): the costly step, which a flood
    /// of made-up tokens would otherwise make unseen.
    public init(source: any JWKSSource, config: TokenConfig, logger: Logger, onSignatureCheck: (@Sendable () -> Void)? = nil) {
        self.config = config
        self.keys = JWKSCache(source: source, algorithms: ["ES256"], minRefreshInterval: config.minRefreshInterval, logger: logger)
        self.onSignatureCheck = onSignatureCheck
    }

    /// How many times the keys were fetched, for tests and metrics.
    public var fetchCount: Int { keys.fetchCount }

    /// How many signatures this verifier has checked (tokens found among those verified recently
    /// are not checked again), for tests and metrics.
    public var signatureCheckCount: Int { signaturesChecked.load(ordering: .relaxed) }

    /// Verifies signature and claims and returns the caller. A client sends one token for up to 15
    /// minutes, so a token verified in the last minute is not verified again (the signature check
    /// and two JSON decodes were a quarter of a profile read); its expiry is still checked each time.
    public func verify(_ token: String, now: Date = Date()) async throws(TokenError) -> Caller {
        try await verifyExpiring(token, now: now).caller
    }

    /// `verify`, with the token's expiry: for what stays open as long as the token is good (the
    /// gateway's event stream ends at it).
    public func verifyExpiring(_ token: String, now: Date = Date()) async throws(TokenError) -> (caller: Caller, expiresAt: Date) {
        if let (caller, expiresAt) = verified.lookup(token) {
            guard now.timeIntervalSince(expiresAt) < leeway else { throw .expired }
            return (caller, expiresAt)
        }
        let (caller, expiresAt) = try await verifyFully(token, now: now)
        verified.store(token, caller: caller, expiresAt: expiresAt)
        return (caller, expiresAt)
    }

    /// The caller of a token verified within the last minute and not expired, without checking
    /// anything now: for decisions that may not wait for a check (the gateway's rate limits).
    public func cachedCaller(_ token: String, now: Date = Date()) -> Caller? {
        cachedCallerExpiring(token, now: now)?.caller
    }

    /// `cachedCaller`, with the token's expiry.
    public func cachedCallerExpiring(_ token: String, now: Date = Date()) -> (caller: Caller, expiresAt: Date)? {
        guard let (caller, expiresAt) = verified.lookup(token), now.timeIntervalSince(expiresAt) < leeway else { return nil }
        return (caller, expiresAt)
    }

    private var leeway: TimeInterval {
        TimeInterval(config.leeway.components.seconds) + TimeInterval(config.leeway.components.attoseconds) / 1e18
    }

    private func verifyFully(_ token: String, now: Date) async throws(TokenError) -> (Caller, Date) {
        let header = try JWTHeaderPeek.header(of: token)
        guard header.alg == "ES256" else { throw .unsupportedAlgorithm(header.alg ?? "none") }
        guard let kid = header.kid, !kid.isEmpty else { throw .malformed("no kid in header") }
        let collection = try await keys.keys(containing: kid)
        signaturesChecked.add(1, ordering: .relaxed)
        onSignatureCheck?()
        let claims: AccessTokenClaims
        do {
            claims = try await collection.verify(token, as: AccessTokenClaims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw .badSignature
        } catch {
            throw .malformed("\(error)")
        }
        guard claims.iss.value == config.issuer else { throw .wrongIssuer(claims.iss.value) }
        guard claims.aud.value.contains(config.audience) else { throw .wrongAudience }
        guard now.timeIntervalSince(claims.exp.value) < leeway else { throw .expired }
        if let nbf = claims.nbf, nbf.value.timeIntervalSince(now) > leeway { throw .notYetValid }
        guard let userID = UUID(parsing: claims.sub.value) else { throw .invalidClaims("sub is not a user id") }
        let sessionID = claims.sid.flatMap(UUID.init(parsing:))
        return (Caller(userID: userID, sessionID: sessionID, roles: Set(claims.roles.compactMap(Role.init(rawValue:))), emailVerified: claims.emailVerified), claims.exp.value)
    }

    /// Fetches the keys unless they were fetched within `minRefreshInterval`.
    public func reload(reason: String = "start") async throws(TokenError) {
        try await keys.reload(reason: reason)
    }
}

/// An issuer's public keys, fetched from its JWKS and cached: an unknown `kid` (the issuer rotated)
/// refreshes them, at most once per `minRefreshInterval`, concurrent callers sharing one fetch; keys
/// older than `maxKeyAge` are fetched again. Used for our own access tokens and for the ID tokens of
/// Apple and Google. Only keys for `algorithms` are loaded, so a token cannot pick a weaker one.
public final class JWKSCache: Sendable {
    private struct Cache {
        var keys = JWTKeyCollection()
        var kids: Set<String> = []
        var lastFetch: ContinuousClock.Instant?
        var lastLoaded: ContinuousClock.Instant?
        var lastError: String?
        var fetchCount = 0
    }

    public static let maxKeyAge: Duration = .seconds(600)

    private let source: any JWKSSource
    private let algorithms: Set<String>
    private let minRefreshInterval: Duration
    private let logger: Logger
    private let cache = Mutex(Cache())
    private let refresh = RefreshGate()

    /// `algorithms`: JWA names among ES256 and RS256.
    public init(source: any JWKSSource, algorithms: Set<String>, minRefreshInterval: Duration, logger: Logger) {
        self.source = source
        self.algorithms = algorithms
        self.minRefreshInterval = minRefreshInterval
        self.logger = logger
    }

    public var fetchCount: Int { cache.withLock { $0.fetchCount } }

    /// The keys, once they include `kid`; throws `unknownKey` if even fresh keys do not.
    public func keys(containing kid: String) async throws(TokenError) -> JWTKeyCollection {
        let (known, keys, stale) = cache.withLock { cache in
            (cache.kids.contains(kid), cache.keys, cache.lastLoaded.map { ContinuousClock.now - $0 > Self.maxKeyAge } ?? true)
        }
        if known && !stale { return keys }
        do {
            try await reload(reason: known ? "max age" : kid)
        } catch {
            // Stale keys are still better than none while the issuer is unreachable.
            if known { return keys }
            throw error
        }
        let (knownNow, keysNow, lastError) = cache.withLock { ($0.kids.contains(kid), $0.keys, $0.lastError) }
        guard knownNow else {
            // Keys that could not be fetched are a 503, not the caller's fault.
            if let lastError, cache.withLock({ $0.kids.isEmpty }) { throw .keysUnavailable(lastError) }
            throw .unknownKey(kid)
        }
        return keysNow
    }

    /// Fetches the keys unless they were fetched within `minRefreshInterval`; concurrent callers share one fetch.
    public func reload(reason: String = "start") async throws(TokenError) {
        do {
            try await refresh.run { [self] in
                let recent = cache.withLock { cache in
                    cache.lastFetch.map { ContinuousClock.now - $0 < minRefreshInterval } ?? false
                }
                if recent { return }
                let jwks: JWKS
                do {
                    jwks = try await source.fetch()
                } catch {
                    cache.withLock { cache in
                        cache.lastFetch = .now
                        cache.lastError = "\(error)"
                    }
                    logger.warning("cannot fetch JWKS", metadata: ["error": "\(error)"])
                    throw TokenError.keysUnavailable("\(error)")
                }
                let collection = JWTKeyCollection()
                var kids: Set<String> = []
                for jwk in jwks.keys where accepts(jwk) {
                    guard let kid = jwk.keyIdentifier else { continue }
                    do {
                        try await collection.add(jwk: jwk)
                        kids.insert(kid.string)
                    } catch {
                        logger.warning("skipping unusable JWK", metadata: ["kid": "\(kid.string)", "error": "\(error)"])
                    }
                }
                cache.withLock { cache in
                    cache.keys = collection
                    cache.kids = kids
                    cache.lastFetch = .now
                    cache.lastLoaded = .now
                    cache.lastError = nil
                    cache.fetchCount += 1
                }
                logger.debug("loaded JWKS", metadata: ["kids": "\(kids.sorted())", "reason": "\(reason)"])
            }
        } catch let error as TokenError {
            throw error
        } catch {
            throw .keysUnavailable("\(error)")
        }
    }

    private func accepts(_ jwk: JWK) -> Bool {
        switch jwk.keyType {
        case .ecdsa:
            return algorithms.contains("ES256") && jwk.curve?.rawValue == "P-256" && (jwk.algorithm == nil || jwk.algorithm == .es256)
        case .rsa:
            return algorithms.contains("RS256") && (jwk.algorithm == nil || jwk.algorithm == .rs256)
        default:
            return false
        }
    }
}

/// The unverified header of a compact JWS: only to pick the key and refuse an algorithm early.
public enum JWTHeaderPeek {
    public struct Header: Decodable, Sendable {
        public var alg: String?
        public var kid: String?
    }

    public static func header(of token: String) throws(TokenError) -> Header {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("expected three dot-separated parts") }
        guard let data = Base64URL.decode(String(parts[0])) else { throw .malformed("header is not base64url") }
        do {
            return try JSONDecoder().decode(Header.self, from: data)
        } catch {
            throw .malformed("header is not JSON")
        }
    }
}

/// Lets one task at a time run a refresh; the others wait for it and then see its result.
actor RefreshGate {
    private var running: Task<Void, any Error>?

    func run(_ work: @escaping @Sendable () async throws -> Void) async throws {
        if let running {
            _ = try? await running.value
            return
        }
        let task = Task { try await work() }
        running = task
        defer { running = nil }
        try await task.value
    }
}

/// base64url (RFC 4648 §5) without padding, on bytes: this runs on every request that carries a
/// token, where Foundation's string replacing (through NSString) cost more than the signature check.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        table[Int(UInt8(ascii: "+"))] = 62  // plain base64 is accepted too
        table[Int(UInt8(ascii: "/"))] = 63
        return table
    }()

    public static func decode(_ text: some StringProtocol) -> Data? {
        var output = Data()
        output.reserveCapacity(text.utf8.count * 3 / 4)
        var buffer: UInt32 = 0
        var bits = 0
        for character in text.utf8 {
            if character == UInt8(ascii: "=") { break }
            let value = values[Int(character)]
            guard value != 0xFF else { return nil }
            buffer = (buffer << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero padding, and a lone 6-bit group is not a byte.
        guard bits < 6, buffer & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return output
    }

    public static func encode(_ data: some DataProtocol) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((data.count * 4 + 2) / 3)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in data {
            buffer = (buffer << 8) | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                output.append(alphabet[Int((buffer >> UInt32(bits)) & 0x3F)])
            }
        }
        if bits > 0 { output.append(alphabet[Int((buffer << UInt32(6 - bits)) & 0x3F)]) }
        return String(decoding: output, as: UTF8.self)
    }

    /// Whether `text` is the one unpadded base64url spelling of what it decodes to. `decode` also
    /// takes `+`, `/` and `=` padding, so one value has several spellings; where the text itself is
    /// recorded (a spent token), only this one may be accepted.
    public static func isCanonical(_ text: some StringProtocol) -> Bool {
        guard let data = decode(text) else { return false }
        return encode(data).utf8.elementsEqual(text.utf8)
    }
}

/// Tokens that passed every check recently, by their exact text. An entry lives a minute at most, so
/// a key the issuer withdraws stops being honoured within a minute even for a token seen before; the
/// table is bounded (cleared when full) so a flood of distinct tokens cannot grow it.
final class VerifiedTokens: Sendable {
    static let lifetime: Duration = .seconds(60)
    static let capacity = 10_000

    private struct Entry {
        var caller: Caller
        var expiresAt: Date
        var until: ContinuousClock.Instant
    }

    /// A token as a key: hashed on its last 32 bytes (part of its signature) and compared byte for
    /// byte, not as Unicode text, under which a token with a letter swapped for an equivalent one
    /// (K and the Kelvin sign) would match. Hashing all of a 600-byte token was most of a lookup.
    /// Only verified tokens are stored, so a forged token that hashes alike costs a comparison but
    /// never matches.
    private struct Key: Hashable {
        let token: String

        func hash(into hasher: inout Hasher) {
            let hashed: Void? = token.utf8.withContiguousStorageIfAvailable { bytes in
                hasher.combine(bytes: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes.suffix(32))))
            }
            if hashed == nil {
                // A bridged or foreign string: the same bytes, copied.
                Array(token.utf8.suffix(32)).withUnsafeBytes { hasher.combine(bytes: $0) }
            }
        }

        static func == (a: Key, b: Key) -> Bool {
            let compared = a.token.utf8.withContiguousStorageIfAvailable { x in
                b.token.utf8.withContiguousStorageIfAvailable { y in
                    x.count == y.count && (x.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0)
                }
            }
            if let compared = compared ?? nil { return compared }
            return a.token.utf8.elementsEqual(b.token.utf8)
        }
    }

    private let entries = Mutex<[Key: Entry]>([:])

    func lookup(_ token: String) -> (Caller, Date)? {
        let now = ContinuousClock.now
        let key = Key(token: token)
        return entries.withLock { entries in
            guard let entry = entries[key] else { return nil }
            guard entry.until > now else {
                entries[key] = nil
                return nil
            }
            return (entry.caller, entry.expiresAt)
        }
    }

    func store(_ token: String, caller: Caller, expiresAt: Date) {
        let now = ContinuousClock.now
        entries.withLock { entries in
            if entries.count >= Self.capacity {
                entries = entries.filter { $0.value.until > now }
                if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[Key(token: token)] = Entry(caller: caller, expiresAt: expiresAt, until: now + Self.lifetime)
        }
    }
}
