import Foundation
import HummingbirdTesting
import Testing

/// A chunked body whose framing breaks after the head was read is the client's fault: `400`, as a
/// head that is not HTTP is, never a `500`.
@Suite struct MalformedChunkTests {
    @Test func aChunkSizeThatIsNoNumberIs400() async throws {
        try await GatewayTests.withGateway { client in
            let port = try #require(client.port)
            for size in ["fffffffffffffffffff", "zz"] {
                let answers = try await RawHTTP.exchange(port: port, "POST /v1/auth/login HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n\(size)\r\n")
                #expect(answers.map(\.status) == [400], "chunk size \(size): \(answers.map(\.status))")
            }
        }
    }
}
