import Foundation
import Logging
import Models
@testable import ServiceKitEvents
@testable import ServiceKitRedis
import Testing
import TestSupport

/// Redis behind Sentinel, on loopback: a primary, a replica and three sentinels. The kit asks the
/// sentinels where the primary is; when the primary dies and the sentinels promote the replica, it
/// finds the new primary by itself, and a relayed batch of events, held by the replica before it
/// counts as sent, survives the failover.
@Suite(.serialized) struct RedisSentinelTests {
    struct SentinelSet {
        var primary: RedisServer
        var replica: RedisServer
        var sentinels: [RedisServer]
        var configuration: RedisConfiguration

        func stop() async {
            for server in sentinels + [replica, primary] { try? await server.stop() }
        }
    }

    static let name = "foodbackend-test"

    /// How long the set may take to settle, and a failover to finish: Sentinel works on timers (a
    /// hello every 2 s, the primary's INFO every 10 s, a failover attempt's timeout), which a full
    /// parallel run on two cores delays; these are upper bounds, and each wait ends when it holds.
    static let settling: Duration = .seconds(60)

    static func start() async throws -> SentinelSet {
        let primary = try RedisServer()
        try await primary.start()
        let replica = try RedisServer(extraArguments: ["--replicaof", "127.0.0.1", String(primary.port)])
        try await replica.start()
        // Until its first sync is done, the replica acknowledges nothing.
        let replicaClient = RedisClient(configuration: replica.configuration, logger: TestEnvironment.logger)
        try await waitUntil(Self.settling) { try await replicaClient.send("ROLE").array?.dropFirst(3).first?.string == "connected" }
        await replicaClient.close()
        var sentinels: [RedisServer] = []
        for _ in 0..<3 {
            let sentinel = try RedisServer(sentinelOf: name, primaryPort: primary.port)
            try await sentinel.start()
            sentinels.append(sentinel)
        }
        var configuration = primary.configuration
        configuration.host = "127.0.0.1"
        configuration.port = 1  // never used: the sentinels say where the primary is
        configuration.sentinels = sentinels.map { .init(host: "127.0.0.1", port: $0.port) }
        configuration.sentinelPrimary = name
        configuration.replicasToWaitFor = 1
        // Before a failover can happen, each sentinel must know the replica and the two others.
        for sentinel in sentinels {
            let asked = RedisClient(configuration: sentinel.configuration, logger: TestEnvironment.logger)
            try await waitUntil(Self.settling) {
                let replicas = try await asked.send("SENTINEL", "replicas", RedisArgument(name)).array?.count ?? 0
                let others = try await asked.send("SENTINEL", "sentinels", RedisArgument(name)).array?.count ?? 0
                return replicas == 1 && others == 2
            }
            await asked.close()
        }
        return SentinelSet(primary: primary, replica: replica, sentinels: sentinels, configuration: configuration)
    }

    /// Each connection finds the new primary on its next command after a failover. Before it: behind
    /// Sentinel a subscriber's answered `PING` says nothing of its messages (a primary cut off from
    /// the others goes on answering while they go to the new one), so a pattern's listener is not
    /// told of it.
    @Test(.timeLimit(.minutes(5))) func commandsFindTheNewPrimaryAfterAFailover() async throws {
        let set = try await Self.start()
        let subscriber = RedisSubscriber(configuration: set.configuration, logger: TestEnvironment.logger, pingInterval: .milliseconds(50))
        let subscribing = Task { try await subscriber.run() }
        let (confirmations, answers) = (Confirmations(), Confirmations())
        let messages = subscriber.psubscribe(
            "room:*", onSubscribed: { _ = confirmations.count.add(1, ordering: .relaxed) }, onAlive: { _ in _ = answers.count.add(1, ordering: .relaxed) })
        try await waitUntil { confirmations.count.load(ordering: .relaxed) == 1 }
        try await Task.sleep(for: .milliseconds(500))
        #expect(answers.count.load(ordering: .relaxed) == 0)
        subscribing.cancel()
        _ = messages
        let redis = RedisClient(configuration: set.configuration, logger: TestEnvironment.logger)
        // WAIT counts the replicas holding this connection's writes: one pipeline, one connection.
        // It returns at the replica's acknowledgement; the limit is for a replica slow to answer.
        let written = try await redis.pipeline([["SET", "kept", "before"], ["WAIT", "1", "10000"]])
        #expect(written.last?.int == 1)
        try await set.primary.stop()
        let started = ContinuousClock.now
        try await waitUntil(Self.settling) { (try? await redis.send("INCR", "after")) != nil }
        TestEnvironment.logger.info("failover", metadata: ["took": "\(ContinuousClock.now - started)"])
        // Each connection of the pool finds the new primary on its next command.
        try await waitUntil(.seconds(10)) { (try? await redis.send("GET", "kept"))?.string == "before" }
        let promoted = RedisClient(configuration: set.replica.configuration, logger: TestEnvironment.logger)
        #expect(try await promoted.send("ROLE").array?.first?.string == "master")
        #expect(try await promoted.send("GET", "after").string == "1")
        await promoted.close()
        await redis.close()
        await set.stop()
    }

    /// Events committed before, during and after the failover are each handled once: the relay's
    /// batches wait for the replica (`WAIT`), so the promoted replica holds every one it counted as sent.
    /// Its waits allow more than two minutes (the set's start, the failover, the events); run beside the
    /// whole suite on two cores it has taken most of that, so the limit that catches a hang is
    /// longer.
    @Test(.timeLimit(.minutes(5))) func noEventIsLostWhenThePrimaryFailsOver() async throws {
        let set = try await Self.start()
        let bus = try await BusHarness(redis: set.configuration)
        bus.startRelay(poll: .milliseconds(100))
        bus.startConsumer(name: "c1")
        var emitted: [EventEnvelope] = []
        for round in 0..<60 {
            if round == 20 { try await set.primary.stop() }
            emitted.append(try await bus.emit())
            try await Task.sleep(for: .milliseconds(50))
        }
        let rows = try await bus.waitForEffects(emitted.count, within: .seconds(60))
        #expect(Set(rows.map(\.0)) == Set(emitted.map(\.id)), "\(emitted.count - Set(rows.map(\.0)).count) events not handled")
        #expect(rows.count == emitted.count)
        await bus.stop()
        await set.stop()
    }
}
