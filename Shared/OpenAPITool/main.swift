import Foundation
import OpenAPIMerge

// `OpenAPITool merge SERVICES`: the merge of SERVICES/*/openapi.yaml (the repository's `Services`),
// the gateway's first, by the rules the gateway's `GET /openapi.json` follows, written as
// `docs/openapi.json` holds it. `scripts/openapi` runs it; the merge has no other implementation.
let arguments = CommandLine.arguments.dropFirst()
guard arguments.count == 2, arguments.first == "merge" else {
    FileHandle.standardError.write(Data("usage: OpenAPITool merge SERVICES_FOLDER\n".utf8))
    exit(2)
}
do {
    let merged = try OpenAPIMerge.merge(try OpenAPISource.repository(services: URL(fileURLWithPath: arguments.last!, isDirectory: true)))
    FileHandle.standardOutput.write(Data(try OpenAPIJSON.snapshot(merged)))
} catch let error as OpenAPIMergeError {
    let problems = error.description.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n")
    FileHandle.standardError.write(Data("the documents do not merge:\n\(problems)\n".utf8))
    exit(2)
} catch {
    FileHandle.standardError.write(Data("OpenAPITool: \(error)\n".utf8))
    exit(1)
}
