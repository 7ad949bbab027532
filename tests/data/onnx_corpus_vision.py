"""torchvision models at small widths for the ONNX corpus (tests/data/make_onnx_corpus.py, which
imports this module from its own folder): ResNets, GoogLeNet and Inception v3 narrowed, and the
other torchvision families at a 64-pixel input."""

def narrow_resnet(torch, block, layers, divisor=4, **kw):
    """torchvision's ResNet with every stage `divisor` times narrower (the class hard-codes
    64..512 channels): its blocks, downsampling and stem unchanged."""
    from torchvision.models.resnet import ResNet

    class NarrowResNet(ResNet):
        def _make_layer(self, blk, planes, blocks, stride=1, dilate=False):
            return super()._make_layer(blk, planes // divisor, blocks, stride, dilate)

    model = NarrowResNet(block, layers, **kw)
    model.fc = torch.nn.Linear(512 // divisor * block.expansion, kw.get("num_classes", 1000))
    return model


def narrow_conv_block(base, divisor=4):
    """torchvision's BasicConv2d `divisor` times narrower (GoogLeNet and Inception v3 hard-code
    their channel counts; all are multiples of 4): the image's 3 channels stay."""

    class NarrowConv(base):
        def __init__(self, in_channels, out_channels, **kw):
            super().__init__(in_channels if in_channels == 3 else in_channels // divisor, out_channels // divisor, **kw)

    return NarrowConv


def torchvision_models(torch, torchvision):
    tv = torchvision.models
    from torchvision.models import convnext, efficientnet, mobilenetv3, regnet, resnet
    from torchvision.models import swin_transformer, vgg

    img = (1, 3, 64, 64)
    yield "resnet", lambda: narrow_resnet(torch, resnet.BasicBlock, [1, 1, 1, 1], num_classes=10), img
    yield "resnet_bottleneck", lambda: narrow_resnet(torch, resnet.Bottleneck, [1, 1, 1, 1],
                                                     num_classes=10), img
    yield "resnext", lambda: narrow_resnet(torch, resnet.Bottleneck, [1, 1, 1, 1], groups=4,
                                           width_per_group=8, num_classes=10), img
    yield "wide_resnet", lambda: narrow_resnet(torch, resnet.Bottleneck, [1, 1, 1, 1],
                                               width_per_group=128, num_classes=10), img
    yield "mobilenet_v2", lambda: tv.MobileNetV2(num_classes=10, width_mult=0.25), img

    def mnv3(arch, width):
        setting, last = mobilenetv3._mobilenet_v3_conf(arch, width_mult=width)
        return tv.MobileNetV3(setting, last, num_classes=10)

    yield "mobilenet_v3_small", lambda: mnv3("mobilenet_v3_small", 0.5), img
    yield "mobilenet_v3_large", lambda: mnv3("mobilenet_v3_large", 0.25), img

    def effnet(arch, width, depth):
        setting, last = efficientnet._efficientnet_conf(arch, width_mult=width, depth_mult=depth)
        return tv.EfficientNet(setting, dropout=0.2, stochastic_depth_prob=0.0, num_classes=10, last_channel=last)

    yield "efficientnet_b0", lambda: effnet("efficientnet_b0", 0.25, 0.25), img
    # _efficientnet_conf ignores the width for v2: its stages (Fused-MBConv, then MBConv) at small widths.
    fused, mb = efficientnet.FusedMBConvConfig, efficientnet.MBConvConfig
    v2 = [fused(1, 3, 1, 8, 8, 1), fused(4, 3, 2, 8, 16, 2), fused(4, 3, 2, 16, 24, 1), mb(4, 3, 2, 24, 32, 2),
          mb(6, 3, 1, 32, 48, 1)]
    yield "efficientnet_v2", lambda: tv.EfficientNet(v2, dropout=0.2, stochastic_depth_prob=0.0, num_classes=10,
                                                     last_channel=128), img

    def regnet_model(se):
        params = regnet.BlockParams.from_init_params(depth=6, w_0=16, w_a=8.0, w_m=2.0, group_width=8,
                                                     se_ratio=0.25 if se else None)
        return tv.RegNet(params, num_classes=10, stem_width=16)

    yield "regnet_x", lambda: regnet_model(False), img
    yield "regnet_y", lambda: regnet_model(True), img
    yield "shufflenet_v2", lambda: tv.ShuffleNetV2([2, 2, 2], [16, 32, 64, 128, 256], num_classes=10), img
    yield "squeezenet1_0", lambda: tv.SqueezeNet("1_0", num_classes=10), img
    yield "squeezenet1_1", lambda: tv.SqueezeNet("1_1", num_classes=10), img
    yield "mnasnet", lambda: tv.MNASNet(0.5, num_classes=10), img
    yield "densenet", lambda: tv.DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_init_features=16,
                                          bn_size=2, num_classes=10), img
    yield "googlenet", lambda: _googlenet(torch), img
    yield "inception_v3", lambda: _inception(torch), (1, 3, 80, 80)
    yield "convnext", lambda: tv.ConvNeXt([convnext.CNBlockConfig(16, 32, 1), convnext.CNBlockConfig(32, 64, 1),
                                           convnext.CNBlockConfig(64, 128, 1), convnext.CNBlockConfig(128, None, 1)],
                                          num_classes=10), img
    yield "vit", lambda: tv.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                              mlp_dim=64, num_classes=10), (1, 3, 32, 32)
    yield "swin", lambda: swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
        stochastic_depth_prob=0.0, num_classes=10), (1, 3, 32, 32)
    yield "swin_v2", lambda: swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
        stochastic_depth_prob=0.0, num_classes=10, block=swin_transformer.SwinTransformerBlockV2,
        downsample_layer=swin_transformer.PatchMergingV2), (1, 3, 32, 32)
    # AlexNet and VGG pool adaptively to 6x6 / 7x7, which the exporter only writes when the feature
    # map is a multiple: 224x224 gives exactly 6x6 / 7x7. Their 4096-wide classifiers (tens of
    # millions of parameters, not settable) are swapped for narrow ones of the same layout.
    yield "alexnet", lambda: _small_classifier(torch, tv.AlexNet(num_classes=10), 256 * 6 * 6), (1, 3, 224, 224)
    yield "vgg", lambda: _small_classifier(torch, tv.VGG(vgg.make_layers(
        [8, "M", 16, "M", 32, 32, "M", 32, 32, "M", 32, 32, "M"]), num_classes=10), 32 * 7 * 7), (1, 3, 224, 224)
    yield "vgg_bn", lambda: _small_classifier(torch, tv.VGG(vgg.make_layers(
        [8, "M", 16, "M", 32, "M", 32, "M", 32, "M"], batch_norm=True), num_classes=10), 32 * 7 * 7), (1, 3, 224, 224)
    yield "resnet_fpn", lambda: _resnet_fpn(torch), img


def _resnet_fpn(torch):
    """A detection backbone: torchvision's BackboneWithFPN (lateral 1x1 convs, nearest-neighbour
    upsampling of the coarser levels, 3x3 output convs, the extra max-pool level) over the narrow
    ResNet; the finest pyramid level is the output."""
    from torchvision.models import resnet
    from torchvision.models.detection.backbone_utils import BackboneWithFPN

    body = narrow_resnet(torch, resnet.BasicBlock, [1, 1, 1, 1], num_classes=10)
    fpn = BackboneWithFPN(body, {"layer1": "0", "layer2": "1", "layer3": "2", "layer4": "3"}, [16, 32, 64, 128], 16)

    class Finest(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fpn = fpn

        def forward(self, x):
            return self.fpn(x)["0"]

    return Finest()


def _googlenet(torch):
    import functools
    import importlib

    googlenet = importlib.import_module("torchvision.models.googlenet")  # the package's name is a function
    conv = narrow_conv_block(googlenet.BasicConv2d)
    blocks = [conv, functools.partial(googlenet.Inception, conv_block=conv),
              functools.partial(googlenet.InceptionAux, conv_block=conv)]
    model = googlenet.GoogLeNet(num_classes=10, aux_logits=False, init_weights=True, blocks=blocks)
    model.fc = torch.nn.Linear(1024 // 4, 10)
    return model


def _inception(torch):
    import functools
    import importlib

    inception = importlib.import_module("torchvision.models.inception")
    conv = narrow_conv_block(inception.BasicConv2d)
    blocks = [conv] + [functools.partial(b, conv_block=conv) for b in (
        inception.InceptionA, inception.InceptionB, inception.InceptionC, inception.InceptionD, inception.InceptionE,
        inception.InceptionAux)]
    model = inception.Inception3(num_classes=10, aux_logits=False, init_weights=True, inception_blocks=blocks)
    model.fc = torch.nn.Linear(2048 // 4, 10)
    return model


def _small_classifier(torch, model, features):
    nn = torch.nn
    model.classifier = nn.Sequential(nn.Dropout(0.5), nn.Linear(features, 64), nn.ReLU(inplace=True), nn.Dropout(0.5),
                                     nn.Linear(64, 64), nn.ReLU(inplace=True), nn.Linear(64, 10))
    return model
