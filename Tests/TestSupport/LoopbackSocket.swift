import Foundation
import Glibc

/// A blocking TCP socket to a loopback port, for tests that speak HTTP byte by byte where a client
/// library would hide what they test: a head sent without its body, a client that stops reading.
/// Its calls block, so tests make them in `blocking`, off the tasks' threads.
public enum LoopbackSocket {
    public struct Failure: Error {
        public var call: String
        public init(call: String) { self.call = call }
    }

    /// A connected socket whose reads give up after 30 s. `receiveBuffer` shrinks its receive buffer,
    /// before connecting, as the window is agreed then.
    public static func connect(port: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(call: "socket") }
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopbackAddress(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw Failure(call: "connect")
        }
        return fd
    }

    /// A socket listening on a loopback port that never accepts: a client's connection is made (the
    /// kernel queues it) and then hears nothing, as from a server that hangs. Closing it resets the
    /// connections it queued.
    public static func listenWithoutAnswering(port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(call: "socket") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = loopbackAddress(port: port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw Failure(call: "bind")
        }
        return fd
    }

    /// `recv`, resumed when a signal interrupts it (the test process's children end with one): the
    /// byte count, 0 at the connection's end, -1 on an error (`errno` says which, `EAGAIN` the timeout).
    public static func receive(_ fd: Int32, into buffer: inout [UInt8]) -> Int {
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            return count
        }
    }

    /// `send` of all of `bytes` but what a send timeout or an error leaves unsent, resumed when a
    /// signal interrupts it: how many bytes went.
    public static func send(_ fd: Int32, _ bytes: [UInt8]) -> Int {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            sent += count
        }
        return sent
    }

    private static func loopbackAddress(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// Sends `head` (a request head, and whatever part of a body the test wants) and reads what comes
    /// back. The wait ends with a problem's last brace or the connection's end; its 30 s bound is only
    /// for a server that never answers (on a loaded machine an answer took over 2 s).
    public static func send(port: Int, _ head: String) async throws -> String {
        try await blocking {
            let fd = try connect(port: port)
            defer { close(fd) }
            _ = send(fd, Array(head.utf8))
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = receive(fd, into: &buffer)
                if count <= 0 { break }
                received += buffer[0..<count]
                if let text = String(bytes: received, encoding: .utf8), text.contains("\r\n\r\n"), text.hasSuffix("}") { break }
            }
            return String(decoding: received, as: UTF8.self)
        }
    }

    /// Runs `body` on a thread of its own. On the tasks' pool (two threads on a two-core machine), two
    /// tests waiting in `recv` at once would hold every thread, and the servers they wait for (whose
    /// routes run as tasks) could not answer until the reads timed out.
    public static func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }
}
