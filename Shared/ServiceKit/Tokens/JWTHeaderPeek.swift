import Foundation

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
