import Foundation
import Models
import ServiceKitCore
import Testing
import TestSupport

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

    /// The real executable, as the image holds it (a `VERSION` file beside it), prints its name and
    /// version and exits 0 in production without any setting: it reads no configuration first.
    @Test(arguments: ServiceRegistry.all.map(\.name) + ["gateway"])
    func theExecutablePrintsItsVersion(executable: String) async throws {
        // A hard link in a folder of its own beside the build's: the process finds its folder through
        // /proc/self/exe, which names the link it was started by.
        let folder = TestEnvironment.binDirectory.appendingPathComponent(TestEnvironment.uniqueName("version"))
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let copy = folder.appendingPathComponent(executable)
        try FileManager.default.linkItem(at: TestEnvironment.binDirectory.appendingPathComponent(executable), to: copy)
        try Data("v9.8.7-1-gabcdef0\n".utf8).write(to: folder.appendingPathComponent("VERSION"))
        let output = folder.appendingPathComponent("out").path
        let process = try ChildProcess([copy.path, "--version"], environment: ["APP_ENV": "production", "PATH": "/usr/bin:/bin"], outputPath: output)
        let status = try await process.wait()
        let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        #expect(status == 0, "\(printed)")
        #expect(printed == "\(executable) v9.8.7-1-gabcdef0\n")
    }
}
