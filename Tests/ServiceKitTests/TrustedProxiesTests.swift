import ServiceKit
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing

@Suite struct TrustedProxiesTests {
    let privateNetworks = TrustedProxies.privateNetworks

    @Test func matchesAddressesInsideItsNetworks() throws {
        for inside in ["127.0.0.1", "10.20.30.40", "172.16.0.1", "172.31.255.255", "192.168.1.1", "::1", "fd12::1", "::ffff:10.0.0.1"] {
            #expect(privateNetworks.contains(inside), "\(inside)")
        }
        for outside in ["8.8.8.8", "172.32.0.1", "172.15.255.255", "192.169.0.1", "2001:db8::1", "::ffff:8.8.8.8", "unknown", ""] {
            #expect(!privateNetworks.contains(outside), "\(outside)")
        }
        let single = try TrustedProxies(parsing: "203.0.113.7")
        #expect(single.contains("203.0.113.7") && !single.contains("203.0.113.8"))
        #expect(try TrustedProxies(parsing: "0.0.0.0/0").contains("198.51.100.1"))
    }

    /// IPv4 addresses are read without libc when they are plain dotted quads; anything else is left to
    /// `inet_pton`, which must then agree.
    @Test func readsDottedQuadsAsInetPtonDoes() throws {
        let lan = try TrustedProxies(parsing: "10.0.0.0/8")
        for inside in ["10.0.0.0", "10.255.255.255", "10.1.20.0"] { #expect(lan.contains(inside), "\(inside)") }
        for outside in ["11.0.0.0", "9.255.255.255", "010.0.0.1", "10.0.0.256", "10.0.0", "10.0.0.0.0", "10..0.0", ".10.0.0.0", "10.0.0.0.", "10.0.0.1 ", "1e.0.0.1"] {
            #expect(!lan.contains(outside), "\(outside)")
        }
        #expect(TrustedProxies.none.client(peer: "198.51.100.7", forwardedFor: nil) == "198.51.100.7")
        #expect(TrustedProxies.none.client(peer: "0.0.0.0", forwardedFor: nil) == "0.0.0.0")
        #expect(privateNetworks.client(peer: "127.0.0.1", forwardedFor: "203.000.113.9") == "127.0.0.1")
    }

    @Test func refusesWhatIsNotANetwork() {
        for text in [" , ", "10.0.0.0/", "10.0.0.0/8,", "10.0.0.0/33", "::1/129", "10.0.0/8", "lb.internal", "10.0.0.0/x", "none, 10.0.0.0/8"] {
            #expect(throws: TrustedProxiesError.self, "\(text)") { try TrustedProxies(parsing: text) }
        }
    }

    /// Per-client limits count an IPv6 client by its /64, an IPv4 one whole.
    @Test func limitsCountIPv6ClientsByTheirSlash64() {
        #expect(TrustedProxies.limitKey("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64")
        #expect(TrustedProxies.limitKey("2001:0db8:0001:0002:ffff:ffff:ffff:ffff") == "2001:db8:1:2::/64")
        #expect(TrustedProxies.limitKey("2001:db8:1:3::1") == "2001:db8:1:3::/64")
        #expect(TrustedProxies.limitKey("::1") == "0:0:0:0::/64")
        #expect(TrustedProxies.limitKey("203.0.113.9") == "203.0.113.9")
        #expect(TrustedProxies.limitKey("unknown") == "unknown")
    }

    @Test func theClientIsTheFirstUntrustedHopFromTheRight() {
        // A client straight on the internet: its own header is ignored.
        #expect(privateNetworks.client(peer: "198.51.100.1", forwardedFor: "10.0.0.9") == "198.51.100.1")
        // Through the gateway: the address it forwarded.
        #expect(privateNetworks.client(peer: "127.0.0.1", forwardedFor: "203.0.113.9") == "203.0.113.9")
        // Through a load balancer and the gateway, with a spoofed entry at the left.
        #expect(privateNetworks.client(peer: "10.0.0.2", forwardedFor: "1.2.3.4, 203.0.113.9, 10.0.0.1") == "203.0.113.9")
        // Only trusted hops: the leftmost one is the best known.
        #expect(privateNetworks.client(peer: "127.0.0.1", forwardedFor: "10.0.0.1") == "10.0.0.1")
        #expect(privateNetworks.client(peer: "127.0.0.1", forwardedFor: nil) == "127.0.0.1")
        #expect(TrustedProxies.none.client(peer: "127.0.0.1", forwardedFor: "203.0.113.9") == "127.0.0.1")
        // An empty or absurd entry stops the walk at the hop that forwarded it.
        for junk in ["203.0.113.9, ", "203.0.113.9,", "203.0.113.9:4711", "client.example", "203.0.113.9, unknown"] {
            #expect(privateNetworks.client(peer: "127.0.0.1", forwardedFor: junk) == "127.0.0.1", "\(junk)")
        }
        // One client, one form.
        #expect(privateNetworks.client(peer: "::ffff:127.0.0.1", forwardedFor: "::ffff:203.0.113.9") == "203.0.113.9")
        #expect(privateNetworks.client(peer: "127.0.0.1", forwardedFor: "2001:DB8:0:0::1") == "2001:db8::1")
    }
}
