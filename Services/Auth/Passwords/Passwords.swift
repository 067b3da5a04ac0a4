import Foundation
import HummingbirdBcrypt
import NIOPosix
import ServiceKit
import Synchronization

/// bcrypt on NIO's thread pool: a hash takes tens of milliseconds of CPU, which must not stall the
/// event loops or the cooperative pool serving other requests.
struct PasswordHasher: Sendable {
    let cost: Int
    /// A hash of a random password at the configured cost: verified against when the account does
    /// not exist (or has no password), so that such a login takes as long as a real one. Made in
    /// the background at start, so it does not delay readiness.
    private let dummy: Task<String, Never>
    /// Called after each check, the dummy's included: operators see bcrypt's load
    /// (`auth_password_checks_total`), and tests see that an unknown account costs one check too.
    private let onCheck: @Sendable () -> Void

    init(cost: Int, onCheck: @escaping @Sendable () -> Void = {}) {
        self.cost = cost
        self.onCheck = onCheck
        // On the thread pool like every hash: tasks share the event-loop threads (`ProcessTuning`).
        dummy = Task { (try? await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(UUID().uuidString, cost: UInt8(cost)) }) ?? Bcrypt.hash(UUID().uuidString, cost: UInt8(cost)) }
    }

    func hash(_ password: String) async throws -> String {
        let cost = UInt8(self.cost)
        return try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
    }

    /// Whether `hash` was made at a lower cost than the configured one (`BCRYPT_COST` raised since):
    /// a sign-in with the right password then hashes it again at the configured cost, so the stored
    /// hashes gain it, and a known address stops answering faster than an unknown one.
    func isWeakerThanConfigured(_ hash: String) -> Bool {
        // `$2b$10$…`: the cost is the second field.
        let fields = hash.split(separator: "$", omittingEmptySubsequences: true)
        guard fields.count >= 2, let stored = Int(fields[1]) else { return false }
        return stored < cost
    }

    /// Checks `password` against `hash`, or burns the same time against the dummy when there is none.
    func verify(_ password: String, hash: String?) async throws -> Bool {
        // bcrypt would compare only the first 72 bytes; no stored password is longer, so a longer one
        // is wrong (after the same work).
        let tooLong = password.utf8.count > PasswordPolicy.maximumBytes || password.unicodeScalars.contains { $0.value == 0 }
        let dummyHash = await dummy.value
        let target = tooLong ? dummyHash : (hash ?? dummyHash)
        let matches = try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: target) }
        onCheck()
        return matches && hash != nil && !tooLong
    }
}

/// The rules a new password must meet. bcrypt reads at most 72 bytes, so a longer password is
/// refused rather than silently cut (two passwords sharing 72 bytes would otherwise be equal).
struct PasswordPolicy: Sendable {
    static let minimumCharacters = 8
    static let maximumBytes = 72

    let common: CommonPasswordList

    /// The rule `password` breaks, as the message the client shows; nil when it is acceptable.
    func violation(_ password: String, email: String? = nil) -> String? {
        if password.count < Self.minimumCharacters {
            return "Use at least \(Self.minimumCharacters) characters."
        }
        if password.utf8.count > Self.maximumBytes {
            return "Use at most \(Self.maximumBytes) bytes (bcrypt ignores anything longer); that is 72 ASCII characters, fewer with accents or emoji."
        }
        if password.unicodeScalars.contains(where: { $0.value == 0 }) {
            return "The password must not contain a NUL character."
        }
        if common.contains(password) {
            return "This password is on the list of the most common passwords; choose one that is harder to guess."
        }
        if let email, password.lowercased() == EmailAddress.normalize(email) || password.lowercased() == EmailAddress.normalize(email).split(separator: "@").first.map(String.init) {
            return "The password must not be your email address."
        }
        return nil
    }
}

/// The shipped list, read on the first password check rather than at start: an idle replica does not
/// hold it, and a service that never sees a new password never reads it. The file's presence is
/// checked at start.
final class CommonPasswordList: Sendable {
    private let url: URL
    private let loaded = Mutex<CommonPasswords?>(nil)

    init() throws {
        guard
            let url = Bundle.module.url(forResource: "Resources/common-passwords", withExtension: "txt")
                ?? Bundle.module.url(forResource: "common-passwords", withExtension: "txt")
        else {
            throw ConfigurationError(problems: ["the common-password list is missing from the auth bundle"])
        }
        self.url = url
    }

    func contains(_ password: String) -> Bool { list().contains(password) }
    var count: Int { list().count }

    private func list() -> CommonPasswords {
        loaded.withLock { list in
            if let list { return list }
            let read = (try? CommonPasswords.load(url)) ?? CommonPasswords(passwords: [])
            list = read
            return read
        }
    }
}

/// The shipped list of common passwords (`Resources/common-passwords.txt`, 30,000 entries), kept as
/// one sorted byte buffer with offsets for binary search: about 350 KB resident, where 30,000
/// `String`s in a set would take several MiB of an idle process.
struct CommonPasswords: Sendable {
    private let bytes: [UInt8]
    private let starts: [Int32]  // entry i is bytes[starts[i] ..< starts[i + 1]]

    init(passwords: [String]) {
        let entries = Set(passwords.map { Array($0.lowercased().utf8) }).sorted { $0.lexicographicallyPrecedes($1) }
        var bytes: [UInt8] = []
        var starts: [Int32] = []
        bytes.reserveCapacity(entries.reduce(0) { $0 + $1.count })
        starts.reserveCapacity(entries.count + 1)
        for entry in entries {
            starts.append(Int32(bytes.count))
            bytes.append(contentsOf: entry)
        }
        starts.append(Int32(bytes.count))
        self.bytes = bytes
        self.starts = starts
    }

    static func load(_ url: URL) throws -> CommonPasswords {
        let list = try CommonPasswords(passwords: String(contentsOf: url, encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.isEmpty }.map(String.init))
        MemoryTuning.releaseFreeMemory()  // hand the parsing garbage back to the system: this runs once
        return list
    }

    var count: Int { starts.count - 1 }

    /// Case-insensitive: "Password1" is as common as "password1".
    func contains(_ password: String) -> Bool {
        let key = Array(password.lowercased().utf8)
        var low = 0
        var high = count
        while low < high {
            let mid = (low + high) / 2
            let entry = bytes[Int(starts[mid])..<Int(starts[mid + 1])]
            if entry.lexicographicallyPrecedes(key) { low = mid + 1 } else { high = mid }
        }
        return low < count && bytes[Int(starts[low])..<Int(starts[low + 1])].elementsEqual(key)
    }
}
