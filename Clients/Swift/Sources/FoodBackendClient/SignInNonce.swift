import Foundation

#if canImport(CryptoKit)
import CryptoKit
#else
import Crypto
#endif

/// One sign-in's nonce from `POST /v1/auth/nonce`. Apple's request takes its SHA-256 (`sha256`, in
/// lowercase hex, which Apple puts in the ID token as it is); Google's takes `raw`. The server gets
/// `raw` back with the token and checks the two agree.
public struct SignInNonce: Sendable, Equatable {
    public let raw: String
    public let expiresAt: Date

    public init(raw: String, expiresAt: Date) {
        self.raw = raw
        self.expiresAt = expiresAt
    }

    /// For `ASAuthorizationAppleIDRequest.nonce`.
    public var sha256: String {
        SHA256.hash(data: Data(raw.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
