import Foundation
import Models

/// The unverified header of a compact JWS, to pick the key and refuse an algorithm early; and the
/// subject its payload names, to refuse a token of an ended session. Nothing here is trusted.
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

    private struct Subject: Decodable {
        var sub: String?
        var sid: String?
    }

    /// The user and session a token's payload names, unverified: only to refuse a token (one whose
    /// session has ended), never to trust one. Nil when the payload cannot be read or names no user.
    public static func subject(of token: String) -> (user: UUID, session: UUID?)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let data = Base64URL.decode(String(parts[1])),
            let subject = try? JSONDecoder().decode(Subject.self, from: data), let user = subject.sub.flatMap(UUID.init(parsing:))
        else { return nil }
        return (user, subject.sid.flatMap(UUID.init(parsing:)))
    }
}
