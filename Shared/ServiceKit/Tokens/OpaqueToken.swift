import Crypto
import Foundation

/// An opaque secret handed to a client (refresh token, mail link token): 256 random bits, base64url.
/// Only its SHA-256 is stored, so a database leak does not leak usable tokens.
public struct OpaqueToken: Sendable {
    public let value: String

    public init() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        value = Base64URL.encode(Data(bytes))
    }

    public var hash: Data { Self.hash(value) }

    /// `Data`, which PostgresNIO binds as `bytea`.
    public static func hash(_ value: String) -> Data { Data(SHA256.hash(data: Data(value.utf8))) }
}
