import AsyncHTTPClient
import Foundation
import JWTKit
import NIOCore

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
