import Foundation
import ServiceKitCore
import Testing

/// `<executable> --version` reads the `VERSION` file the Dockerfile writes beside the executable.
@Suite struct BuildVersionTests {
    @Test func readsTheFirstLineBesideTheExecutable() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("build-version-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let executable = folder.appendingPathComponent("social").path
        #expect(BuildVersion.read(besideExecutable: executable) == BuildVersion.unversioned)
        try Data("  v1.4.0-3-g1a2b3c4 \nsecond line\n".utf8).write(to: folder.appendingPathComponent("VERSION"))
        #expect(BuildVersion.read(besideExecutable: executable) == "v1.4.0-3-g1a2b3c4")
        try Data("\n".utf8).write(to: folder.appendingPathComponent("VERSION"))
        #expect(BuildVersion.read(besideExecutable: executable) == BuildVersion.unversioned)
    }
}
