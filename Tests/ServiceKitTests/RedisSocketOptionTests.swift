import Foundation
import NIOCore
import Testing
import TestSupport

@testable import ServiceKitRedis

#if canImport(Glibc)
import Glibc
#endif

/// `TCP_NODELAY` lives at the TCP level: set at the socket level, the same number is `SO_DEBUG`,
/// which needs `CAP_NET_ADMIN`. As root it was set silently (and Nagle's delay stayed on); in a
/// container without the capability every connection to Redis failed with "Permission denied".
@Suite struct RedisSocketOptionTests {
    @Test func aRedisConnectionSetsNoDelayAtTheTCPLevelAndNotSocketDebugging() async throws {
        let connection = try await RedisConnection.connect(try TestEnvironment.redis(), eventLoopGroup: NIOSingletons.posixEventLoopGroup)
        defer { connection.close() }
        let noDelay = try await connection.channel.getOption(.tcpOption(.tcp_nodelay)).get()
        let debugging = try await connection.channel.getOption(.socketOption(NIOBSDSocket.Option(rawValue: SO_DEBUG))).get()
        #expect(noDelay != 0, "TCP_NODELAY is off")
        #expect(debugging == 0, "SO_DEBUG is on")
    }
}
