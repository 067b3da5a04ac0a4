import Foundation
import Models
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import Testing
import TestSupport

@Suite struct ConfigTests {
    @Test func defaultsServeTheLocalStack() throws {
        let config = try ServiceConfig.load(name: "social", defaultPort: 8082, environment: [:])
        #expect(config.listener.port == 8082 && config.listener.host == "127.0.0.1" && !config.listener.reusePort)
        #expect(config.database.user == "social" && config.database.schema == "social" && config.database.database == "foodbackend")
        #expect(config.redis.port == 6379)
        #expect(config.events.group == "social")
    }

    @Test func everyProblemIsNamedInOneError() {
        let environment = ["APP_ENV": "production", "HTTP_PORT": "eighty", "DATABASE_POOL_SIZE": "0", "REDIS_URL": "http://x"]
        let error = #expect(throws: ConfigurationError.self) {
            try ServiceConfig.load(name: "social", defaultPort: 8082, environment: environment)
        }
        let text = String(describing: error!)
        for variable in ["HTTP_PORT", "DATABASE_POOL_SIZE", "REDIS_URL", "DATABASE_URL", "JWKS_URL", "JWT_ISSUER"] {
            #expect(text.contains(variable), "\(variable) missing from: \(text)")
        }
    }

    /// Redis Sentinel: the sentinels listed, the primary's name, and one replica to wait for by
    /// default; an entry that is not `host:port` is named in the error.
    @Test func sentinelsAreReadFromTheirList() throws {
        let config = try ServiceConfig.load(
            name: "social", defaultPort: 8082, environment: ["REDIS_SENTINELS": "127.0.0.1:26379, sentinel-2:26380", "REDIS_SENTINEL_PRIMARY": "main"])
        #expect(config.redis.sentinels == [.init(host: "127.0.0.1", port: 26379), .init(host: "sentinel-2", port: 26380)])
        #expect(config.redis.sentinelPrimary == "main" && config.redis.replicasToWaitFor == 1)
        #expect(try ServiceConfig.load(name: "social", defaultPort: 8082, environment: [:]).redis.replicasToWaitFor == 0)
        let error = #expect(throws: ConfigurationError.self) {
            try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["REDIS_SENTINELS": "127.0.0.1"])
        }
        #expect(String(describing: error!).contains("REDIS_SENTINELS"))
    }

    /// The services' pools keep all their connections open (see `PostgresClient(database:)`).
    @Test func thePoolKeepsAllItsConnections() throws {
        #expect(try ServiceConfig.load(name: "social", defaultPort: 8082, environment: [:]).database.minimumConnections == 10)
        let sized = try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["DATABASE_POOL_SIZE": "6"]).database
        #expect(sized.poolSize == 6 && sized.minimumConnections == 6)
    }

    @Test func trustedProxiesAreNetworksOrNone() throws {
        #expect(try ServiceConfig.load(name: "social", defaultPort: 8082, environment: [:]).trustedProxies == .privateNetworks)
        #expect(try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["TRUSTED_PROXIES": "none"]).trustedProxies == .none)
        let config = try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["TRUSTED_PROXIES": "10.1.0.0/16, 2001:db8::/32"])
        #expect(config.trustedProxies.contains("10.1.200.3") && !config.trustedProxies.contains("10.2.0.1"))
        let error = #expect(throws: ConfigurationError.self) {
            try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["TRUSTED_PROXIES": "10.0.0.0/8, 10.0.0.0/33, lb.internal"])
        }
        let empty = #expect(throws: ConfigurationError.self) {
            try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["TRUSTED_PROXIES": " "])
        }
        #expect(String(describing: empty!).contains("TRUSTED_PROXIES: is set but empty"))
        let text = String(describing: error!)
        #expect(text.contains("TRUSTED_PROXIES") && text.contains("10.0.0.0/33") && text.contains("lb.internal") && !text.contains("10.0.0.0/8,"))
    }

    /// Read before anything starts a loop; a value out of range leaves NIO's default (and the
    /// configuration then stops the process, below).
    @Test func eventLoopThreadsAreReadOnlyWhenSane() {
        #expect(ProcessTuning.eventLoopThreads(in: ["EVENT_LOOP_THREADS": "1"]) == 1)
        #expect(ProcessTuning.eventLoopThreads(in: ["EVENT_LOOP_THREADS": " 8 "]) == 8)
        for bad in ["0", "65", "-1", "two", ""] {
            #expect(ProcessTuning.eventLoopThreads(in: ["EVENT_LOOP_THREADS": bad]) == nil, "\(bad)")
        }
        #expect(ProcessTuning.eventLoopThreads(in: [:]) == nil)
    }

    @Test func passwordsInURLsAreNotEchoed() {
        let error = #expect(throws: ConfigurationError.self) {
            try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["DATABASE_URL": "mysql://u:s3cret@h/db"])
        }
        #expect(!String(describing: error!).contains("s3cret"))
    }

    /// The real executable, started with a missing variable, says so and exits non-zero.
    @Test(arguments: ServiceRegistry.all.map(\.name) + ["gateway"])
    func startUpWithAMissingVariableExitsNonZero(executable: String) async throws {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("out")).path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let process = try ChildProcess(
            [TestEnvironment.binDirectory.appendingPathComponent(executable).path],
            environment: ["APP_ENV": "production", "PATH": "/usr/bin:/bin", "EVENT_LOOP_THREADS": "0"], outputPath: output)
        let status = try await process.wait()
        let message = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        #expect(status == 1)
        #expect(message.contains("invalid configuration"))
        #expect(message.contains(executable == "gateway" ? "AUTH_URL" : "DATABASE_URL"), "\(message)")
        #expect(message.contains("EVENT_LOOP_THREADS: must be between 1 and 64, got 0"), "\(message)")
    }
}
