import Foundation
import Hummingbird
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceLifecycle
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
}
