import Foundation
import Hummingbird
import JWTKit
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

@Suite struct ServiceStartupTests {
    /// A migration that fails stops the process with the error instead of hanging in start-up.
    @Test func aBrokenMigrationStopsTheServiceWithItsError() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let definition = ServiceDefinition(
            name: "social", defaultPort: 0,
            migrations: {
                [Migration(name: "0001_broken", sql: "CREATE TABLE t (id int); SELECT * FROM no_such_table;")]
            })
        let config = ServiceConfig.test(name: "social", database: database, redis: try TestEnvironment.redis(), stream: TestEnvironment.uniqueName("events"))
        let app = try buildServiceApplication(definition, config: config)
        let error = await #expect(throws: (any Error).self) {
            try await withTimeout(.seconds(30), what: "service start-up") {
                try await ServiceGroup(services: [app], logger: TestEnvironment.logger).run()
            }
        }
        #expect(String(describing: error.map { $0 } as Any).contains("0001_broken"), "\(String(describing: error))")
    }

    /// A service started before its token issuer answers loads the keys on its own once it does,
    /// before any request asks for them.
    @Test func theIssuersKeysLoadAtStartOnceTheIssuerAnswers() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        let source = KeysUnavailableAtFirst(failures: 2, then: HTTPJWKSSource(url: issuer.jwksURL, httpClient: HTTPClientBox.shared))
        let tokens = Mutex<TokenVerifier?>(nil)
        let definition = ServiceDefinition(
            name: "social", defaultPort: 0, migrations: { [] },
            setup: { _ in
                ServiceSetup(
                    tokenSource: source,
                    build: { _, dependencies in
                        tokens.withLock { $0 = dependencies.tokens }
                        return ServiceComponents()
                    })
            })
        var config = ServiceConfig.test(name: "social", database: database, redis: try TestEnvironment.redis(), stream: TestEnvironment.uniqueName("events"))
        config.tokens.minRefreshInterval = .milliseconds(300)
        let app = try buildServiceApplication(definition, config: config)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await ServiceGroup(services: [app], logger: TestEnvironment.logger).run() }
            try await waitUntil(.seconds(10)) { source.calls >= 3 && tokens.withLock { $0?.fetchCount } == 1 }
            group.cancelAll()
        }
        #expect(issuer.fetches == 1)
    }

    /// A graceful shutdown while the keys are being fetched ends that fetch instead of waiting for
    /// it: a stopping process has no use for them.
    @Test func aStopDuringTheKeysFetchDoesNotWaitForIt() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let source = KeysThatNeverCome()
        let definition = ServiceDefinition(
            name: "social", defaultPort: 0, migrations: { [] },
            setup: { _ in ServiceSetup(tokenSource: source, build: { _, _ in ServiceComponents() }) })
        let config = ServiceConfig.test(name: "social", database: database, redis: try TestEnvironment.redis(), stream: TestEnvironment.uniqueName("events"))
        let app = try buildServiceApplication(definition, config: config)
        let group = ServiceGroup(services: [app], logger: TestEnvironment.logger)
        let running = Task { try await group.run() }
        try await waitUntil(.seconds(10)) { source.calls == 1 }
        let stopping = ContinuousClock.now
        await group.triggerGracefulShutdown()
        try await withTimeout(.seconds(20), what: "graceful shutdown") { try await running.value }
        #expect(ContinuousClock.now - stopping < .seconds(5))
        #expect(source.calls == 1 && source.cancelled)
    }
}

/// A JWKS source whose fetch never ends unless its task is cancelled.
final class KeysThatNeverCome: JWKSSource {
    private let state = Mutex((calls: 0, cancelled: false))
    var calls: Int { state.withLock { $0.calls } }
    var cancelled: Bool { state.withLock { $0.cancelled } }

    func fetch() async throws -> JWKS {
        state.withLock { $0.calls += 1 }
        do {
            try await Task.sleep(for: .seconds(3600))
        } catch {
            state.withLock { $0.cancelled = true }
            throw error
        }
        throw TokenError.keysUnavailable("never")
    }
}
