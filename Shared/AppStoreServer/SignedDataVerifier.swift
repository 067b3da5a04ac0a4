import Crypto
import Foundation
import JWTKit
import Synchronization
import X509

/// Why a signed App Store payload was refused. Every case is the sender's fault (`400`).
public struct AppStoreVerificationError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: String, Sendable {
        case malformed, algorithm, chain, signature, bundle, environment, appAppleID, stale, future

        /// What a client is told: fixed words, so nothing of the verifier's internals or this
        /// server's configuration leaks (the full message is for the log).
        public var sentence: String {
            switch self {
            case .malformed: "it is not a signed App Store payload."
            case .algorithm: "it is not signed with ES256."
            case .chain: "its certificate chain is not Apple's."
            case .signature: "its signature does not verify."
            case .bundle: "it is for another app."
            case .environment: "its environment is not accepted here."
            case .appAppleID: "it is for another app."
            case .stale: "it was signed too long ago."
            case .future: "its signing date is in the future."
            }
        }
    }
    public var reason: Reason
    public var message: String
    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }
    public var description: String { "\(reason.rawValue): \(message)" }
}

/// Verifies what the App Store signs, as Apple's app-store-server-library does: `alg` ES256 only,
/// an `x5c` of exactly three certificates, the leaf and intermediate chained to a configured root
/// (never to `x5c[2]` itself) under Apple's OID rules, the chain valid at the payload's
/// `signedDate`, the signature by the leaf's key; then the bundle id, the environment and, for
/// production notifications, the app's Apple id.
public struct SignedDataVerifier: Sendable {
    public struct Configuration: Sendable {
        public var rootCertificates: [Certificate]
        public var bundleID: String
        /// Required to accept production notifications.
        public var appAppleID: Int64?
        /// `production` also accepts sandbox payloads (App Review buys in the sandbox).
        public var environment: AppStoreEnvironment
        /// Xcode and StoreKit-testing payloads, for development only.
        public var acceptsLocalEnvironments: Bool
        /// Notifications signed longer ago than this are refused.
        public var notificationMaxAge: TimeInterval
        /// How far in the future a `signedDate` may lie (clock skew).
        public var clockSkew: TimeInterval

        public init(
            rootCertificates: [Certificate], bundleID: String, appAppleID: Int64?, environment: AppStoreEnvironment, acceptsLocalEnvironments: Bool,
            notificationMaxAge: TimeInterval, clockSkew: TimeInterval = 300
        ) {
            self.rootCertificates = rootCertificates
            self.bundleID = bundleID
            self.appAppleID = appAppleID
            self.environment = environment
            self.acceptsLocalEnvironments = acceptsLocalEnvironments
            self.notificationMaxAge = notificationMaxAge
            self.clockSkew = clockSkew
        }

        /// The environments whose payloads are accepted.
        public var acceptedEnvironments: Set<AppStoreEnvironment> {
            var accepted: Set<AppStoreEnvironment> = environment == .production ? [.production, .sandbox] : [environment]
            if acceptsLocalEnvironments { accepted.formUnion([.xcode, .localTesting]) }
            return accepted
        }
    }

    /// A notification with its signed parts verified.
    public struct VerifiedNotification: Sendable {
        public var notification: AppStoreNotification
        public var transaction: AppStoreTransaction?
        public var renewalInfo: AppStoreRenewalInfo?
    }

    public let configuration: Configuration
    private let verifier: X5CVerifier
    private let chains = VerifiedChains()
    private let chainChecks = ChainCheckCount()
    private let onChainCheck: (@Sendable () -> Void)?

    /// `onChainCheck` hears of each certificate chain parsed and checked (a metric): the costly
    /// step, which only a payload that passed every cheaper check reaches.
    public init(_ configuration: Configuration, onChainCheck: (@Sendable () -> Void)? = nil) throws {
        self.configuration = configuration
        verifier = try X5CVerifier(rootCertificates: configuration.rootCertificates)
        self.onChainCheck = onChainCheck
    }

    /// How many certificate chains this verifier has parsed and checked, for tests and metrics.
    public var chainCheckCount: Int { chainChecks.value.load(ordering: .relaxed) }

    /// A transaction from a device (a purchase or a restore). Not held to a freshness window:
    /// restores carry old `signedDate`s.
    public func verifyTransaction(_ jws: String, now: Date) async throws -> AppStoreTransaction {
        let transaction = try await verify(jws, as: AppStoreTransaction.self, now: now)
        try check(bundle: transaction.bundleID, environment: transaction.environment)
        return transaction
    }

    public func verifyRenewalInfo(_ jws: String, now: Date) async throws -> AppStoreRenewalInfo {
        let info = try await verify(jws, as: AppStoreRenewalInfo.self, now: now)
        try check(environment: info.environment)
        return info
    }

    /// A server notification, then the transaction and renewal info inside it, each checked the
    /// same way and against the notification's environment.
    public func verifyNotification(_ jws: String, now: Date) async throws -> VerifiedNotification {
        let notification = try await verify(jws, as: AppStoreNotification.self, now: now)
        if now.timeIntervalSince(notification.signedDate) > configuration.notificationMaxAge {
            throw AppStoreVerificationError(.stale, "the notification was signed more than \(Int(configuration.notificationMaxAge / 86_400)) days ago")
        }
        guard let data = notification.data else {
            // Summary and external-purchase-token notifications name their app elsewhere; one that
            // names no app at all is no notification for this one.
            guard let app = notification.summary ?? notification.externalPurchaseToken else {
                throw AppStoreVerificationError(.bundle, "the notification names no app")
            }
            let environment = app.environment ?? configuration.environment
            try check(bundle: app.bundleID, environment: environment)
            if environment == .production, let expected = configuration.appAppleID, app.appAppleID != expected {
                throw AppStoreVerificationError(.appAppleID, "the notification is for another app (appAppleId)")
            }
            return VerifiedNotification(notification: notification)
        }
        try check(bundle: data.bundleID, environment: data.environment)
        if data.environment == .production {
            guard let expected = configuration.appAppleID, data.appAppleID == expected else {
                throw AppStoreVerificationError(.appAppleID, "the notification is for another app (appAppleId)")
            }
        }
        var verified = VerifiedNotification(notification: notification)
        if let signed = data.signedTransactionInfo {
            let transaction = try await verifyTransaction(signed, now: now)
            guard transaction.environment == data.environment else { throw AppStoreVerificationError(.environment, "the transaction's environment differs") }
            verified.transaction = transaction
        }
        if let signed = data.signedRenewalInfo {
            let info = try await verifyRenewalInfo(signed, now: now)
            guard info.environment == data.environment else { throw AppStoreVerificationError(.environment, "the renewal info's environment differs") }
            verified.renewalInfo = info
        }
        return verified
    }

    private func check(bundle: String? = nil, environment: AppStoreEnvironment) throws {
        if let bundle, bundle != configuration.bundleID {
            throw AppStoreVerificationError(.bundle, "the payload is for bundle \(bundle), not \(configuration.bundleID)")
        }
        guard configuration.acceptedEnvironments.contains(environment) else {
            throw AppStoreVerificationError(.environment, "payloads from the \(environment.rawValue) environment are not accepted here")
        }
    }

    struct Header: Decodable {
        var alg: String?
        var x5c: [String]?
    }

    struct SignedDateOnly: Decodable {
        var signedDate: Int64
    }

    /// A signed payload's largest size. A notification (its transaction and renewal info inside, each
    /// with its own three certificates) is some 20 KB; anything larger is refused unread.
    public static let maxJWSBytes = 64 << 10
    /// The largest certificate in an `x5c`, as base64: Apple's are about 2 KB.
    static let maxCertificateCharacters = 8 << 10

    /// The signature and chain of `jws`, checked before its payload is believed. Everything that can
    /// be checked without a certificate is checked first (size, three parts, `alg`, three base64 DER
    /// certificates in `x5c`, a 64-byte signature, a `signedDate`), so a made-up payload costs no
    /// certificate parsing. The payload's `signedDate` (read unverified first) is the time the chain
    /// must be valid at, as Apple's library does offline; a date in the future is refused.
    func verify<Payload: JWTPayload>(_ jws: String, as type: Payload.Type, now: Date) async throws -> Payload {
        guard jws.utf8.count <= Self.maxJWSBytes else { throw AppStoreVerificationError(.malformed, "larger than \(Self.maxJWSBytes) bytes") }
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Self.base64URL(parts[0]), let payloadData = Self.base64URL(parts[1]),
            let header = try? JSONDecoder().decode(Header.self, from: headerData)
        else { throw AppStoreVerificationError(.malformed, "not a compact JWS") }
        guard header.alg == "ES256" else { throw AppStoreVerificationError(.algorithm, "alg must be ES256") }
        guard let x5c = header.x5c, x5c.count == 3 else {
            throw AppStoreVerificationError(.chain, "x5c must hold exactly three certificates (leaf, intermediate, root)")
        }
        for (index, certificate) in x5c.enumerated() {
            guard certificate.utf8.count <= Self.maxCertificateCharacters, let der = Data(base64Encoded: certificate), Self.isDERSequence(der) else {
                throw AppStoreVerificationError(.malformed, "x5c[\(index)] is not a base64 DER certificate")
            }
        }
        guard let signatureBytes = Self.base64URL(parts[2]), signatureBytes.count == 64 else {
            throw AppStoreVerificationError(.malformed, "the signature is not 64 bytes of ES256")
        }
        guard let dated = try? JSONDecoder().decode(SignedDateOnly.self, from: payloadData) else {
            throw AppStoreVerificationError(.malformed, "the payload has no signedDate")
        }
        let signedDate = Date(timeIntervalSince1970: Double(dated.signedDate) / 1000)
        guard signedDate.timeIntervalSince(now) <= configuration.clockSkew else { throw AppStoreVerificationError(.future, "signedDate is in the future") }
        if let key = chains.key(for: x5c, at: signedDate) {
            // This very chain passed the whole check before, and every certificate in it (and every
            // configured root) is valid at this date: only the payload's own signature is left.
            guard let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
                key.isValidSignature(ecdsa, for: Data(jws.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count)))
            else { throw AppStoreVerificationError(.signature, "the signature does not verify") }
            do {
                return try JSONDecoder().decode(Payload.self, from: payloadData)
            } catch {
                throw AppStoreVerificationError(.malformed, "the payload could not be read")
            }
        }
        chainChecks.value.add(1, ordering: .relaxed)
        onChainCheck?()
        do {
            let payload = try await verifier.verifyJWS(Array(jws.utf8), as: Payload.self, jsonDecoder: JSONDecoder(), validationTime: .fixed(signedDate), policy: { AppleChainPolicy() })
            chains.remember(x5c, roots: configuration.rootCertificates)
            return payload
        } catch let error as JWTError {
            switch error.errorType {
            case .invalidX5CChain, .missingX5CHeader: throw AppStoreVerificationError(.chain, "the certificate chain is not Apple's: \(error.reason ?? "invalid")")
            case .signatureVerificationFailed: throw AppStoreVerificationError(.signature, "the signature does not verify")
            default: throw AppStoreVerificationError(.malformed, "the payload could not be read: \(error.reason ?? "\(error.errorType)")")
            }
        } catch let error as AppStoreVerificationError {
            throw error
        } catch {
            throw AppStoreVerificationError(.malformed, "the payload could not be read")
        }
    }

    /// Whether `der` is one DER SEQUENCE filling it exactly, as a certificate is: its tag, then a
    /// length (short or long form) that accounts for every byte. Nothing inside is read.
    static func isDERSequence(_ der: Data) -> Bool {
        let bytes = [UInt8](der)
        guard bytes.count >= 2, bytes[0] == 0x30 else { return false }
        let first = Int(bytes[1])
        if first < 0x80 { return bytes.count == 2 + first }
        let lengthBytes = first & 0x7F
        guard (1...3).contains(lengthBytes), bytes.count > 2 + lengthBytes else { return false }
        let length = bytes[2..<(2 + lengthBytes)].reduce(0) { $0 << 8 | Int($1) }
        return bytes.count == 2 + lengthBytes + length
    }

    /// Base64url without padding, as JWS writes it, decoded byte by byte: the header carries three
    /// certificates, and string replacements over it cost more than the signature check.
    static func base64URL(_ text: Substring) -> Data? {
        var bytes = [UInt8]()
        bytes.reserveCapacity(text.utf8.count + 3)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "-"): bytes.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): bytes.append(UInt8(ascii: "/"))
            default: bytes.append(byte)
            }
        }
        while bytes.count % 4 != 0 { bytes.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(bytes))
    }
}

final class ChainCheckCount: Sendable {
    let value = Atomic<Int>(0)
}

/// Chains that passed the whole check, by their `x5c`: the App Store signs with a handful of
/// certificates that change a few times a year, so most payloads arrive with a chain already
/// verified. An entry gives the leaf's key and the dates every certificate of the chain, and every
/// configured root, is valid for; outside them the chain is checked again in full.
final class VerifiedChains: Sendable {
    struct Entry: Sendable {
        var key: P256.Signing.PublicKey
        var from: Date
        var until: Date
    }

    private let entries = Mutex<[[String]: Entry]>([:])
    static let capacity = 32

    func key(for x5c: [String], at date: Date) -> P256.Signing.PublicKey? {
        guard let entry = entries.withLock({ $0[x5c] }), entry.from <= date, date <= entry.until else { return nil }
        return entry.key
    }

    func remember(_ x5c: [String], roots: [Certificate]) {
        let certificates = x5c.compactMap { Data(base64Encoded: $0) }.compactMap { try? Certificate(derEncoded: [UInt8]($0)) }
        guard certificates.count == x5c.count, let leaf = certificates.first, let key = P256.Signing.PublicKey(leaf.publicKey) else { return }
        let all = certificates + roots
        let entry = Entry(key: key, from: all.map(\.notValidBefore).max() ?? .distantFuture, until: all.map(\.notValidAfter).min() ?? .distantPast)
        entries.withLock { entries in
            if entries.count >= Self.capacity { entries.removeAll() }
            entries[x5c] = entry
        }
    }
}
