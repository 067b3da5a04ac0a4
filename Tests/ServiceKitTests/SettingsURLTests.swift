import Foundation
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitRedis
import Testing

/// The settings' URLs, read with Foundation's `URLComponents`.
@Suite struct SettingsURLTests {
    /// A password is written percent-encoded in a URL; a refused URL is echoed with it hidden as written.
    @Test func aPercentEncodedPasswordIsNotEchoed() {
        let error = #expect(throws: ConfigurationError.self) {
            try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["DATABASE_URL": "mysql://u:s3%40cret@h/db"])
        }
        let message = String(describing: error!)
        #expect(!message.contains("s3%40cret") && !message.contains("s3@cret"), "\(message)")
        #expect(message.contains("mysql://u:***@h/db"), "\(message)")
        let spaced = #expect(throws: ConfigurationError.self) {
            try ServiceConfig.load(name: "social", defaultPort: 8082, environment: ["DATABASE_URL": "mysql://u:s3 cret@h/db"])
        }
        #expect(!String(describing: spaced!).contains("s3 cret"), "\(spaced!)")
    }

    @Test func theDatabaseAndRedisAreReadFromTheirURLs() throws {
        let config = try ServiceConfig.load(
            name: "social", defaultPort: 8082,
            environment: [
                "DATABASE_URL": "postgres://u%40x:p%40ss@[::1]:6543/diary?sslmode=require",
                "REDIS_URL": "redis://:r%2Fpw@[fd00::7]:6380/3",
            ])
        #expect(config.database.host == "::1" && config.database.port == 6543 && config.database.database == "diary")
        #expect(config.database.user == "u@x" && config.database.password == "p@ss" && config.database.requireTLS)
        #expect(config.redis.host == "fd00::7" && config.redis.port == 6380 && config.redis.password == "r/pw" && config.redis.database == 3)
        let plain = try #require(RedisConfiguration(url: "redis://127.0.0.1:56379"))
        #expect(plain.host == "127.0.0.1" && plain.port == 56379 && plain.password == nil && plain.database == 0)
    }

    @Test func aURLWithoutAHostOrWithAnotherSchemeIsRefused() {
        for (name, text) in [("REDIS_URL", "redis://"), ("REDIS_URL", "redis:///2"), ("DATABASE_URL", "postgres://h:port/db"), ("REDIS_URL", "127.0.0.1:6379")] {
            let error = #expect(throws: ConfigurationError.self) {
                try ServiceConfig.load(name: "social", defaultPort: 8082, environment: [name: text])
            }
            #expect(String(describing: error!).contains(name), "\(text)")
        }
        #expect(RedisConfiguration(url: "redis://") == nil && RedisConfiguration(url: "http://h") == nil)
    }
}
