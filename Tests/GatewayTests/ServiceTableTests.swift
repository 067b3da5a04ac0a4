import Foundation
@testable import Gateway
import HummingbirdTesting
import NIOCore
import ServiceKitHTTP
import Testing
import TestSupport

/// `services.txt` is the one list of services: the gateway routes and probes exactly what it says,
/// on the ports it gives, with no list of its own to forget a line in.
@Suite struct ServiceTableTests {
    struct Line {
        var name: String
        var port: Int
        var prefixes: [String]
    }

    /// The table as scripts/stack reads it: the first, second and fifth words of each line that is
    /// not blank or a comment. Read here on its own, not through the code under test.
    static func table() throws -> [Line] {
        let text = try String(contentsOf: TestEnvironment.packageRoot.appendingPathComponent("services.txt"), encoding: .utf8)
        return text.split(separator: "\n").compactMap { line -> Line? in
            let words = line.split(separator: " ", omittingEmptySubsequences: true)
            guard let first = words.first, !first.hasPrefix("#") else { return nil }
            return Line(name: String(words[0]), port: Int(words[1]) ?? -1, prefixes: words[4].split(separator: ",").map(String.init))
        }
    }

    @Test func theGatewaysDefaultUpstreamsAreTheTablesServicesOnTheirPorts() throws {
        let table = try Self.table()
        #expect(table.count >= 5)
        let config = try GatewayConfig.load(environment: [:])
        #expect(config.upstreams == Dictionary(uniqueKeysWithValues: table.map { ($0.name, "http://127.0.0.1:\($0.port)") }))
    }

    /// Every prefix the table gives a service, and any path below it, reaches that service through the
    /// gateway, and the gateway's readiness probes every service in the table.
    @Test func theGatewaySendsEachPrefixInTheTableToItsService() async throws {
        let table = try Self.table()
        var upstreams: [String: EchoUpstream] = [:]
        for line in table {
            let upstream = EchoUpstream(name: line.name)
            try await upstream.start()
            upstreams[line.name] = upstream
        }
        defer { for upstream in upstreams.values { upstream.stop() } }
        var config = try GatewayConfig.load(environment: [:])
        for name in config.upstreams.keys { config.upstreams[name] = upstreams[name]?.baseURL ?? config.upstreams[name] }
        let adminPort = try RedisServer.freePort()
        config.listener = .init(host: "127.0.0.1", port: 0)
        config.admin = .init(host: "127.0.0.1", port: adminPort)
        config.logLevel = .warning
        config.rateLimits = GatewayTests.noRateLimits
        config.redis = try TestEnvironment.redis()
        try await buildApplication(config).test(.live) { client in
            for line in table {
                for prefix in line.prefixes {
                    for path in [prefix, prefix + "/x"] {
                        let response = try await client.execute(uri: path, method: .get)
                        #expect(response.headers[.init("X-Upstream")!] == line.name, "\(path): \(response.status)")
                    }
                }
            }
            let readiness = try await ConcurrentClient.send(port: adminPort, "GET", "/readyz")
            let status = try JSONDecoder().decode(GatewayHealthRoutes.Status.self, from: Data(buffer: readiness.body))
            #expect(Set(status.upstreams.keys) == Set(table.map(\.name)))
        }
    }
}
