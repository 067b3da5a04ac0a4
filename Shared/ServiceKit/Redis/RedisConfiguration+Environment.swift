import Foundation
import ServiceKitCore

extension RedisConfiguration {
    /// `REDIS_URL`, `REDIS_POOL_SIZE`, `REDIS_COMMAND_TIMEOUT_MS`, and for Redis Sentinel
    /// `REDIS_SENTINELS` (`host:port,…`), `REDIS_SENTINEL_PRIMARY` and `REDIS_WAIT_REPLICAS`: what
    /// every service and the gateway read.
    public init(reading env: inout EnvironmentReader) {
        let url = env.url("REDIS_URL", default: "redis://127.0.0.1:6379", schemes: ["redis"], requiredInProduction: env.values["REDIS_SENTINELS"] == nil)
        self.init(
            host: url?.hostName ?? "127.0.0.1", port: url?.port ?? 6379, password: url?.password,
            database: Int(url?.path.dropFirst() ?? "") ?? 0,
            poolSize: env.int("REDIS_POOL_SIZE", default: 4, range: 1...64),
            commandTimeout: .milliseconds(Int64(env.int("REDIS_COMMAND_TIMEOUT_MS", default: 5_000, range: 10...600_000)))
        )
        let listed = env.string("REDIS_SENTINELS", default: "")
        for entry in listed.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            let parts = entry.split(separator: ":", omittingEmptySubsequences: false)
            if parts.count == 2, !parts[0].isEmpty, let port = Int(parts[1]), (1...65_535).contains(port) {
                sentinels.append(SentinelAddress(host: String(parts[0]), port: port))
            } else {
                env.report("REDIS_SENTINELS: each entry must be host:port, got \"\(entry)\"")
            }
        }
        sentinelPrimary = env.string("REDIS_SENTINEL_PRIMARY", default: "foodbackend")
        replicasToWaitFor = env.int("REDIS_WAIT_REPLICAS", default: sentinels.isEmpty ? 0 : 1, range: 0...16)
    }
}
