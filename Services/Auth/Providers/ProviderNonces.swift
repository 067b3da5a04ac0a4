import Crypto
import Foundation
import PostgresNIO
import ServiceKit

/// Nonces for Sign in with Apple and Google, issued by this service and good for one sign-in before
/// they expire. The app asks for one (`POST /v1/auth/nonce`), hands it to Apple (as its SHA-256 in
/// lowercase hex) or Google (as it is), and sends it back with the ID token. An ID token copied from
/// an earlier sign-in carries a nonce that is spent or expired, so it signs no one in again; a nonce
/// the app made up itself could be sent again with the copied token.
///
/// A nonce is 16 random bytes, its expiry and an HMAC of both, under a key derived from the access-
/// token signing key: issuing one writes nothing (anyone may ask), and every replica that signs
/// with the same key accepts it. A sign-in is spent in its own transaction: under its nonce, or,
/// where `PROVIDER_NONCE_REQUIRED=false` lets one come without, under what its ID token's issuer
/// signed (`header.payload`, in the one spelling the verifier accepts). A refused
/// sign-in (a disabled account, say) rolls the spending back with the rest; it changed nothing, and
/// the same token sent again is judged again.
struct ProviderNonces: Sendable {
    static let lifetime: TimeInterval = 600

    enum Problem: Error {
        case forged, expired, spent

        var apiError: APIError {
            switch self {
            case .forged: .unauthorized("The nonce was not issued by this server; get one from POST /v1/auth/nonce.", code: "invalid_nonce")
            case .expired: .unauthorized("The nonce has expired; get a new one and sign in with the provider again.", code: "invalid_nonce")
            case .spent: .unauthorized("The nonce has been used for a sign-in already; get a new one and sign in with the provider again.", code: "invalid_nonce")
            }
        }
    }

    private let key: SymmetricKey

    init(signingKey: P256.Signing.PrivateKey) {
        // Its own key, not the signing key itself: an HMAC and an ECDSA signature must not share one.
        key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: signingKey.rawRepresentation),
            info: Data("foodbackend provider sign-in nonce v1".utf8), outputByteCount: 32)
    }

    func issue(now: Date = Date()) -> (nonce: String, expiresAt: Date) {
        let expiresAt = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + Self.lifetime).rounded(.down))
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        for part in [generator.next() as UInt64, generator.next(), UInt64(expiresAt.timeIntervalSince1970)] {
            withUnsafeBytes(of: part.bigEndian) { bytes.append(contentsOf: $0) }
        }
        bytes.append(contentsOf: mac(bytes))
        return (Base64URL.encode(bytes), expiresAt)
    }

    /// The nonce's expiry, when this server issued it (written as it was issued) and it has not expired.
    func check(_ nonce: String, now: Date = Date()) throws(Problem) -> Date {
        // One spelling only (the decoder also takes `+`, `/` and padding): the spent record is kept
        // under the text, which must not have a second form.
        guard nonce.utf8.count == 54, let data = Base64URL.decode(nonce), data.count == 40, Base64URL.encode(data) == nonce else { throw .forged }
        let bytes = Array(data)
        // Compared in constant time: how far a guess matched must not show in the response's timing.
        guard zip(mac(Array(bytes[..<24])), bytes[24...]).reduce(0, { $0 | ($1.0 ^ $1.1) }) == 0 else { throw .forged }
        let seconds = bytes[16..<24].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let expiresAt = Date(timeIntervalSince1970: TimeInterval(seconds))
        guard now < expiresAt else { throw .expired }
        return expiresAt
    }

    /// Records a sign-in as made, under `nonce`, or under what the ID token's issuer signed
    /// (`header.payload`) when it came without one, in the caller's transaction; refuses one made
    /// before. Two sign-ins with one nonce at once: the second waits for the first's transaction,
    /// then is refused.
    func spend(nonce: String?, expiresAt nonceExpiry: Date?, identity: VerifiedIdentity, on connection: PostgresConnection, logger: Logger) async throws {
        let (value, until) = nonce.flatMap { nonce in nonceExpiry.map { (Substring(nonce), $0) } } ?? (identity.signedPart, identity.usableUntil)
        let hash = Data(SHA256.hash(data: Data(value.utf8)))
        let fresh = try await connection.returnsRow(
            """
            INSERT INTO spent_provider_sign_ins (value_hash, expires_at) VALUES (\(hash), \(until))
            ON CONFLICT DO NOTHING RETURNING true
            """, logger: logger)
        guard fresh else {
            throw nonce == nil
                ? APIError.unauthorized("The ID token has been used for a sign-in already; sign in with the provider again.", code: "invalid_id_token")
                : Problem.spent.apiError
        }
    }

    /// The first 16 bytes of HMAC-SHA256: 128 bits, as much as the random part.
    private func mac(_ bytes: [UInt8]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: bytes, using: key).prefix(16))
    }
}
