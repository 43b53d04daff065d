import Foundation
import PackagePlugin

/// Carries the files of a target's `Page` folder (HTML, JavaScript, CSS) in its binary as
/// string constants on `enum PageFiles` (`call.html` is `PageFiles.callHTML`). The files stay
/// files, edited and opened in a browser as they are; the node serves them from memory, so an
/// installed binary needs nothing beside it.
@main
struct EmbedPage: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let folder = target.directoryURL.appending(path: "Page")
        let files = try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)
            .filter { ["html", "js", "css"].contains($0.pathExtension) }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        let output = context.pluginWorkDirectoryURL.appending(path: "PageFiles.swift")
        return [.buildCommand(displayName: "Embedding \(target.name)'s page files",
                              executable: try context.tool(named: "EmbedFiles").url,
                              arguments: [output.path(), "PageFiles"] + files.map { $0.path() },
                              inputFiles: files, outputFiles: [output])]
    }
}
